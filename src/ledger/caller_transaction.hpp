// SPDX-License-Identifier: MIT
// Completing inside the caller's own PostgreSQL transaction (feature loads: the load's data
// change and its completion commit together). The one part of the ledger that speaks libpq to
// its callers, so the ledger interface itself (ledger.hpp) does not.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ledger/ledger.hpp"

// libpq's connection type (libpq-fe.h).
typedef struct pg_conn PGconn;

namespace idem {

// The identity of the database a libpq connection reaches, comparable with
// WorkerLedger::database_identity() (throws k_ledger when the query fails).
std::string database_identity_of(PGconn* connection);

// WorkerLedger::complete(), run on `connection` inside the transaction the caller has open there
// (BEGIN done, COMMIT left to the caller): the completion commits or rolls back with the caller's
// writes, and its row lock keeps any claimer out until then. Only for a PostgreSQL ledger whose
// database_identity() is the connection's; throws k_ledger otherwise (SQLite, another database,
// no open transaction). Fenced exactly like complete(); false changes nothing.
bool complete_in_transaction(WorkerLedger& ledger, PGconn* connection, const std::string& work_key,
                             const std::string& claim_token, const OutputFingerprint& fingerprint,
                             std::optional<int64_t> feature_count);

}  // namespace idem
