// SPDX-License-Identifier: MIT
// The PostgreSQL ledger's protocol: statements sent unprepared on their first use and prepared
// from their second (a one-shot process pays no PREPARE round trips), or sent while the caller
// works and answered after (exec_overlapped); answers checked, and errors made clear: a lost
// connection says the outcome is unknown, and the next call reconnects.
#include <cpl_conv.h>
#include <cpl_error.h>
#include <cpl_string.h>
#include <libpq-fe.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>

#include "base/error.hpp"
#include "ledger/postgres_ledger.hpp"

namespace idem::ledger_detail {

// The answer to the one statement in flight on the connection (sent with PQsend*): its result,
// anything after it dropped; null when none came (a broken connection).
PgResult PostgresLedger::take_answer() {
  PgResult answer;
  while (PGresult* result = PQgetResult(m_connection.get())) {
    if (!answer) {
      answer.reset(result);
    } else {
      PQclear(result);
    }
  }
  return answer;
}

void PostgresLedger::fail(const PGresult* result, const std::string& what) {
  std::string message = result != nullptr ? PQresultErrorMessage(result) : "";
  if (message.empty()) {
    message = PQerrorMessage(m_connection.get());
  }
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) {
    message.pop_back();
  }
  if (PQstatus(m_connection.get()) != CONNECTION_OK) {
    throw LedgerUnreachable(
        scrub("the connection to the PostgreSQL ledger " + m_redacted + " was lost during " + what +
              " (its outcome is unknown; retrying with the same claim token is safe; "
              "the next call reconnects): " +
              message));
  }
  const char* state = result != nullptr ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
  const std::string code = state != nullptr ? state : "";
  restore_read_only_transaction();
  throw Error(ErrorKind::k_ledger,
              scrub("PostgreSQL ledger " + m_redacted + ": " + what + " failed" +
                    (!code.empty() ? " (SQLSTATE " + code + ")" : "") + ": " + message));
}

std::vector<const char*> PostgresLedger::raw_params(const Params& params) {
  std::vector<const char*> raw;
  raw.reserve(params.size());
  for (const auto& param : params) {
    raw.push_back(param ? param->c_str() : nullptr);
  }
  return raw;
}

// A read-only ledger (Ledger::open_read_only) reads inside one READ ONLY transaction, so the
// server refuses any write whatever the statement. A session setting would outlive this client
// on a transaction-mode pooler (PgBouncer hands the server session to others); a transaction
// ends with it. After a failed statement the aborted transaction is replaced by a new one.
void PostgresLedger::begin_read_only_transaction() {
  checked(PQexec(m_connection.get(), "BEGIN TRANSACTION READ ONLY"),
          "starting a read-only transaction");
}

void PostgresLedger::restore_read_only_transaction() {
  if (!m_read_only || !m_connection || PQtransactionStatus(m_connection.get()) != PQTRANS_INERROR) {
    return;
  }
  PgResult rollback(PQexec(m_connection.get(), "ROLLBACK"));
  PgResult begin(PQexec(m_connection.get(), "BEGIN TRANSACTION READ ONLY"));
}

PgResult PostgresLedger::checked(PGresult* raw, const std::string& what) {
  PgResult result(raw);
  const ExecStatusType status = result ? PQresultStatus(result.get()) : PGRES_FATAL_ERROR;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    fail(result.get(), what);
  }
  return result;
}

PgResult PostgresLedger::exec_prepared(const char* name, const Params& params,
                                       const std::string& what) {
  const std::vector<const char*> raw = raw_params(params);
  return checked(PQexecPrepared(m_connection.get(), name, static_cast<int>(raw.size()), raw.data(),
                                nullptr, nullptr, 0),
                 what);
}

PgResult PostgresLedger::exec_params(const std::string& sql, const Params& params,
                                     const std::string& what) {
  const std::vector<const char*> raw = raw_params(params);
  return checked(PQexecParams(m_connection.get(), sql.c_str(), static_cast<int>(raw.size()),
                              nullptr, raw.data(), nullptr, nullptr, 0),
                 what);
}

int64_t PostgresLedger::affected(const PgResult& result) {
  const char* tuples = PQcmdTuples(result.get());
  return tuples[0] == '\0' ? 0 : std::strtoll(tuples, nullptr, 10);
}

// Sends a statement (`name` prepared, else `sql` with its parameters), runs `meanwhile` (taken:
// it runs once) while the server works on it, then reads the answer. An exception from
// `meanwhile` is rethrown once the answer has been read.
PgResult PostgresLedger::exec_overlapped(const char* name, const std::string& sql,
                                         const Params& params, const std::string& what,
                                         std::function<void()>& meanwhile) {
  const std::vector<const char*> raw = raw_params(params);
  const int count = static_cast<int>(raw.size());
  const int sent = name != nullptr ? PQsendQueryPrepared(m_connection.get(), name, count,
                                                         raw.data(), nullptr, nullptr, 0)
                                   : PQsendQueryParams(m_connection.get(), sql.c_str(), count,
                                                       nullptr, raw.data(), nullptr, nullptr, 0);
  std::exception_ptr failure;
  if (sent == 1) {
    std::function<void()> run = std::move(meanwhile);
    meanwhile = nullptr;
    try {
      run();
    } catch (...) {
      failure = std::current_exception();
    }
  }
  PgResult checked_answer = checked(take_answer().release(), what);
  if (failure) {
    std::rethrow_exception(failure);
  }
  return checked_answer;
}

// The name a statement is prepared under: `base_name` and a hash of `sql`, so that a statement
// found prepared in a pooled server session (an earlier client's) is this very text.
std::string PostgresLedger::statement_name(const char* base_name, const std::string& sql) {
  uint64_t hash = 0xcbf29ce484222325ULL;  // FNV-1a, 64 bits
  for (const unsigned char c : sql) {
    hash = (hash ^ c) * 0x100000001b3ULL;
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(hash));
  return std::string(base_name) + "_" + hex;
}

// Runs one of the ledger's fixed statements by name. Its first use on a connection sends it
// unprepared (one round trip: a one-shot process pays nothing at open); the second prepares
// it, and later uses run the prepared statement (parsed once per connection). A `meanwhile`
// that is set runs while the server works on the statement (exec_overlapped); such a use
// never prepares (a PREPARE would be a round trip of its own before the overlap), it runs the
// statement prepared only when an earlier use prepared it, else unprepared. A statement found
// prepared in the server session (read_schema_state) or prepared ahead (prepare_ahead) runs
// prepared from its first use.
PgResult PostgresLedger::exec_statement(const char* base_name, const std::string& sql,
                                        const Params& params, const std::string& what,
                                        std::function<void()>* meanwhile) {
  const bool overlapped = meanwhile != nullptr && *meanwhile;
  const std::string prepared_name = statement_name(base_name, sql);
  const char* name = prepared_name.c_str();
  int& uses = m_statement_uses[prepared_name];
  if (overlapped) {
    if (uses == 2) {
      return exec_overlapped(name, sql, params, what, *meanwhile);
    }
    uses = 1;
    return exec_overlapped(nullptr, sql, params, what, *meanwhile);
  }
  if (uses == 0 || m_read_only) {  // a read-only ledger prepares nothing (few statements)
    uses = 1;
    return exec_params(sql, params, what);
  }
  if (uses == 1) {
    PgResult prepared(PQprepare(m_connection.get(), name, sql.c_str(), 0, nullptr));
    const char* code = prepared ? PQresultErrorField(prepared.get(), PG_DIAG_SQLSTATE) : nullptr;
    if (code != nullptr && std::strcmp(code, k_duplicate_prepared_statement) == 0) {
      // A pooler handed over a server session where an earlier client prepared it.
      checked(PQexec(m_connection.get(), (std::string("DEALLOCATE ") + name).c_str()),
              std::string("preparing ") + name);
      prepared.reset(PQprepare(m_connection.get(), name, sql.c_str(), 0, nullptr));
    }
    checked(prepared.release(), std::string("preparing ") + name);
    uses = 2;
  }
  return exec_prepared(name, params, what);
}

}  // namespace idem::ledger_detail
