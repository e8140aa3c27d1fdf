// SPDX-License-Identifier: MIT
// Completing inside a caller's transaction: the identity that tells whether a libpq connection
// reaches the ledger's own database, and the completion itself, which only a backend that offers
// ledger_detail::CallerTransactionCompletion (PostgreSQL) can do.
#include "ledger/caller_transaction.hpp"

#include <libpq-fe.h>

#include "base/error.hpp"
#include "ledger/ledger_internal.hpp"
#include "pg/pg_handles.hpp"

namespace idem {

namespace {

// A database is its oid within a cluster, and a cluster run is its postmaster's start time (as
// epoch seconds, so the session's TimeZone/DateStyle do not matter).
constexpr const char* k_identity_sql =
    "SELECT d.oid::text || '@' || extract(epoch FROM pg_postmaster_start_time())::text "
    "FROM pg_database d WHERE d.datname = current_database()";

}  // namespace

std::string database_identity_of(PGconn* connection) {
  if (connection == nullptr || PQstatus(connection) != CONNECTION_OK) {
    throw Error(ErrorKind::k_ledger, "no open PostgreSQL connection to identify");
  }
  pg::Result result(
      PQexecParams(connection, k_identity_sql, 0, nullptr, nullptr, nullptr, nullptr, 0));
  if (!result || PQresultStatus(result.get()) != PGRES_TUPLES_OK || PQntuples(result.get()) != 1) {
    std::string message = result ? PQresultErrorMessage(result.get()) : PQerrorMessage(connection);
    while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) {
      message.pop_back();
    }
    throw Error(ErrorKind::k_ledger, "cannot identify the PostgreSQL database: " + message);
  }
  return PQgetvalue(result.get(), 0, 0);
}

bool complete_in_transaction(WorkerLedger& ledger, PGconn* connection, const std::string& work_key,
                             const std::string& claim_token, const OutputFingerprint& fingerprint,
                             std::optional<int64_t> feature_count) {
  auto* backend = dynamic_cast<ledger_detail::CallerTransactionCompletion*>(&ledger);
  if (backend == nullptr) {
    throw Error(ErrorKind::k_ledger, "the " + ledger.backend_name() +
                                         " ledger cannot complete inside another database's "
                                         "transaction; use complete()");
  }
  return backend->complete_in_transaction(connection, work_key, claim_token, fingerprint,
                                          feature_count);
}

}  // namespace idem
