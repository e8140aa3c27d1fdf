// SPDX-License-Identifier: MIT
// How the gdal-idem command's operations reach the ledger: opening it (read-only for the commands
// that only read, invariant I4), naming it in messages, paging, keys and outputs as the user
// gives them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cli.hpp"
#include "ledger/ledger.hpp"

namespace idem::cli {

// Ledger to use, opened; k_ledger errors propagate (exit 3).
std::unique_ptr<Ledger> open_ledger(const GlobalOptions& global);
// The same for a command that only reads (invariant I4, Ledger::open_read_only).
std::unique_ptr<Ledger> open_ledger_read_only(const GlobalOptions& global);
// The DSN as shown in messages (password masked).
std::string ledger_label(const GlobalOptions& global);

// The value of a --namespace or --layer option (`option`), checked (check_label: one line of
// printable characters, at most 256 bytes); throws UsageError naming the option otherwise.
std::string label_argument(const std::string& option, const std::string& value);

// Whether `key_text` looks like (a prefix of) a lowercase hex key.
bool is_hex_key_prefix(const std::string& key_text);

// An output given on the command line as the ledger records it: /vsiidem/ paths mapped to the
// real path, local paths made absolute, other /vsi paths as given.
std::string output_uri_argument(const std::string& text);

// Rows of `filter` in the live table and in history (most recent first by completion or claim).
std::vector<LedgerRow> rows_with_history(Ledger& ledger, const Ledger::RowFilter& filter);

// Rows per ledger query of the commands that page through the ledger (reap, verify):
// IDEM_LEDGER_PAGE_ROWS (config option or environment), default 1000.
int64_t ledger_page_rows();

}  // namespace idem::cli
