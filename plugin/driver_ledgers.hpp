// SPDX-License-Identifier: MIT
// The ledgers of the IDEM driver's process: one connection per DSN, opened ahead on the first use
// of /vsiidem/, and the ledger rows a user's own delete through /vsiidem/ drops first.
#pragma once

#include <memory>
#include <string>

#include "ledger/ledger.hpp"

namespace idem {

// The process's ledger for `dsn`, opened on first use and kept open for the next calls while it is
// one of the few most recently used (driver_ledgers.cpp); the caller holds it for its call.
std::shared_ptr<WorkerLedger> shared_ledger(const std::string& dsn);
// The digest cache of the ledger for `dsn` opened read-only (Ledger::open_read_only), for dry
// runs: digests are looked up, never recorded. Opened on first use; it lives for the process.
DigestCache& shared_lookup_digest_cache(const std::string& dsn);
// /vsiidem/'s use hook: the first use in a process starts opening IDEM_LEDGER's ledger ahead
// (Ledger::preopen), and each later use moves it on.
void note_vsiidem_use();
// /vsiidem/'s unlink hook: before a deferred unlink removes `real_path`, the completed rows that
// record that very file lose their completion. False (with a warning) when the ledger could not
// be asked: the file is then kept.
bool forget_before_unlink(const std::string& real_path);

}  // namespace idem
