// The PostgreSQL ledger's session: connecting (or taking the connection opened ahead), sending
// statements (unprepared on a statement's first use, prepared from its second, so a one-shot
// process pays no PREPARE round trips), answers read ahead while the caller works (the PostGIS
// load, the claim's confirmation and the next statements' PREPAREs), and errors: a lost
// connection gives a clear error, and the next call reconnects.
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

namespace {

// Server messages below WARNING ("schema idem already exists, skipping"...) are not for the
// user: the client-side equivalent of client_min_messages = warning, without its round trip.
void forward_warnings(void* /*unused*/, const PGresult* result) {
  const char* severity = PQresultErrorField(result, PG_DIAG_SEVERITY_NONLOCALIZED);
  if (severity != nullptr) {
    for (const char* quiet : {"NOTICE", "INFO", "DEBUG", "LOG"}) {
      if (std::strcmp(severity, quiet) == 0) {
        return;
      }
    }
  }
  std::string message = PQresultErrorMessage(result);
  while (!message.empty() && message.back() == '\n') {
    message.pop_back();
  }
  CPLError(CE_Warning, CPLE_AppDefined, "PostgreSQL ledger: %s", message.c_str());
}

}  // namespace

// The message on one line (libpq's are multi-line), without the password.
std::string PostgresLedger::scrub(const std::string& message) const {
  std::string line;
  for (char c : message) {
    if (c == '\n' || c == '\t' || c == '\r') {
      if (!line.empty() && line.back() != ' ') {
        line += ' ';
      }
    } else {
      line += c;
    }
  }
  while (!line.empty() && line.back() == ' ') {
    line.pop_back();
  }
  return scrub_secrets(line, m_secrets);
}

void PostgresLedger::connect() {
  m_connection.reset();
  m_statement_uses.clear();
  m_postgis_load = PostgisLoad::k_not_started;
  m_read_ahead = ReadAhead{};
  m_session_keeps_statements = false;
  m_prepare_ahead = PrepareAhead{};
  for (auto& [token, confirmation] : m_confirmations) {
    if (confirmation == Confirmation::k_pending) {
      confirmation = Confirmation::k_unknown;  // its answer went with the old connection
    }
  }
  const bool skip_gss = skip_gss_encryption(m_dsn);
  auto connect_now = [this](bool without_gss) {
    const auto parameters = connect_parameters(m_dsn, without_gss);
    return PgConnection(PQconnectdbParams(parameters.keywords.data(), parameters.values.data(), 1));
  };
  // The connection that Ledger::preopen started for this DSN, if any (with the answer to the
  // schema query, which open_schema() takes); else one made now, the same way.
  PgConnection connection;
  bool opened_ahead = false;
  if (auto preopened = take_postgres_preopened(m_dsn)) {
    if (preopened->timed_out) {
      throw Error(ErrorKind::k_ledger,
                  "cannot connect to the PostgreSQL ledger " + m_redacted + ": timeout expired");
    }
    connection = std::move(preopened->connection);
    m_first_schema_answer = std::move(preopened->first_answer);
    opened_ahead = true;
  } else {
    connection = connect_now(skip_gss);
  }
  if (skip_gss && connection && PQstatus(connection.get()) != CONNECTION_OK) {
    // A server that takes this host only with GSSAPI encryption (hostgssenc): libpq's way.
    m_first_schema_answer.reset();
    opened_ahead = false;
    connection = connect_now(false);
  }
  if (!connection) {
    throw Error(ErrorKind::k_ledger,
                "cannot connect to the PostgreSQL ledger " + m_redacted + ": out of memory");
  }
  if (PQstatus(connection.get()) != CONNECTION_OK) {
    std::string message = PQerrorMessage(connection.get());
    while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) {
      message.pop_back();
    }
    throw Error(ErrorKind::k_ledger,
                scrub("cannot connect to the PostgreSQL ledger " + m_redacted + ": " + message));
  }
  ++m_connections;
  if (opened_ahead) {
    ++m_connections_opened_ahead;
    CPLDebug("IDEM", "ledger %s: using the connection opened ahead", m_redacted.c_str());
  }
  PQsetNoticeReceiver(connection.get(), &forward_warnings, nullptr);
  m_connection = std::move(connection);
}

// Reconnect once when the previous call lost the connection (and re-read the schema, which a
// migration may have changed meanwhile).
void PostgresLedger::ensure_connected() {
  finish_postgis_load();
  finish_read_ahead();
  finish_prepare_ahead();
  if (!m_connection || PQstatus(m_connection.get()) != CONNECTION_OK) {
    connect();
    use_schema(read_schema_state(false));
  }
}

// The first write to idem.ledger on a connection loads the PostGIS library into its backend
// (the footprint column's constraint and GiST index), which the claim would pay
// (bench/RESULTS.md). After a digest-cache miss the caller hashes the source before it claims, so
// the load is started then, asynchronously: a statement that binds a geometry in the column's
// type and changes nothing. Its result is read (and any error of it ignored: the claim reports
// its own) before the next statement; a broken connection is then reconnected as usual.
void PostgresLedger::start_postgis_load() {
  if (!m_has_footprint || m_postgis_load != PostgisLoad::k_not_started) {
    return;
  }
  const char* values[] = {"SRID=4326;MULTIPOLYGON EMPTY"};
  if (PQsendQueryParams(m_connection.get(), "UPDATE idem.ledger SET footprint = $1 WHERE false", 1,
                        nullptr, values, nullptr, nullptr, 0) == 1) {
    m_postgis_load = PostgisLoad::k_pending;
  }
}

void PostgresLedger::finish_postgis_load() {
  if (m_postgis_load != PostgisLoad::k_pending) {
    return;
  }
  m_postgis_load = PostgisLoad::k_done;
  PgResult answer = take_answer();
  if (answer && PQresultStatus(answer.get()) != PGRES_COMMAND_OK) {
    CPLDebug("IDEM", "PostGIS load ahead of the claim: %s", PQresultErrorMessage(answer.get()));
  }
}

// Right after a claim, while its work runs: the claim made without waiting for its flush is
// confirmed (`confirm_token` set: k_confirm_ahead_sql), the completion this process sends next
// is prepared, and in a server session that keeps prepared statements (a pooler's, see
// m_session_keeps_statements) the first claim too, for the next client. One query, not waited
// for; finish_prepare_ahead reads its answer before the next statement. A statement prepared
// costs the server no more than one sent unprepared; in a kept session, later clients skip
// its parsing, and once it has run a few times PostgreSQL may reuse a generic plan.
void PostgresLedger::prepare_ahead(const std::string& confirm_token) {
  if (!confirm_token.empty()) {
    m_confirmations[confirm_token] = Confirmation::k_unknown;  // until its answer is sent
  }
  if (m_prepare_ahead.pending) {
    return;  // a confirmation not sent is made by confirm_claim
  }
  const CompletionStatement completion = completion_statement();
  const std::string complete_sql = completion.sql;
  std::vector<std::pair<std::string, const std::string*>> wanted;
  wanted.emplace_back(statement_name(completion.base_name, complete_sql), &complete_sql);
  if (m_session_keeps_statements) {
    // The driver's first claim (its claims are confirmed before publishing).
    const bool deferred = claims_may_wait_for_confirmation();
    wanted.emplace_back(
        statement_name(claim_unless_completed_name(deferred), claim_unless_completed_sql(deferred)),
        &claim_unless_completed_sql(deferred));
  }
  std::string query;
  PrepareAhead ahead;
  if (!confirm_token.empty()) {
    query = k_confirm_ahead_sql;
    ahead.confirm_token = confirm_token;
  }
  for (const auto& [name, sql] : wanted) {
    const auto known = m_statement_uses.find(name);
    if (known != m_statement_uses.end() && known->second == 2) {
      continue;  // prepared already
    }
    query += "PREPARE " + name + " AS " + *sql + ";";
    ahead.names.push_back(name);
  }
  if (query.empty() || PQsendQuery(m_connection.get(), query.c_str()) != 1) {
    return;
  }
  ahead.pending = true;
  if (!ahead.confirm_token.empty()) {
    m_confirmations[ahead.confirm_token] = Confirmation::k_pending;
  }
  m_prepare_ahead = std::move(ahead);
}

void PostgresLedger::finish_prepare_ahead() {
  if (!m_prepare_ahead.pending) {
    return;
  }
  m_prepare_ahead.pending = false;
  // The confirmation's BEGIN, SELECT and COMMIT come first, then one result per PREPARE; an
  // error ends the query (the statements after it do not run).
  const bool confirming = !m_prepare_ahead.confirm_token.empty();
  const int first_prepare = confirming ? k_confirm_ahead_results : 0;
  bool confirmed = false;
  int index = 0;
  size_t prepared = 0;
  std::string error;
  while (PGresult* raw = PQgetResult(m_connection.get())) {
    PgResult result(raw);
    const ExecStatusType status = PQresultStatus(result.get());
    const bool ok = status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK;
    if (index < first_prepare) {
      // A COMMIT of a failed transaction answers ROLLBACK.
      confirmed =
          index == first_prepare - 1 && ok && std::strcmp(PQcmdStatus(result.get()), "COMMIT") == 0;
    } else if (ok) {
      if (prepared < m_prepare_ahead.names.size()) {
        m_statement_uses[m_prepare_ahead.names[prepared]] = 2;
      }
      ++prepared;
    }
    if (!ok && error.empty()) {
      error = PQresultErrorMessage(result.get());
    }
    ++index;
  }
  // An error inside the confirmation's BEGIN ... COMMIT (a role that may not emit the message)
  // leaves its transaction open and aborted, and every later statement would fail.
  const PGTransactionStatusType state = PQtransactionStatus(m_connection.get());
  if (state == PQTRANS_INERROR || state == PQTRANS_INTRANS) {
    PgResult rollback(PQexec(m_connection.get(), "ROLLBACK"));
  }
  if (confirming) {
    const auto found = m_confirmations.find(m_prepare_ahead.confirm_token);
    if (found != m_confirmations.end()) {
      found->second = confirmed ? Confirmation::k_confirmed : Confirmation::k_unknown;
    }
  }
  if (!error.empty()) {
    // Nothing lost: a statement not prepared runs unprepared, and a claim not confirmed here
    // is confirmed by confirm_claim.
    CPLDebug("IDEM", "ledger: preparing ahead: %s", error.c_str());
  }
}

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
    throw Error(
        ErrorKind::k_ledger,
        scrub("the connection to the PostgreSQL ledger " + m_redacted + " was lost during " + what +
              " (its outcome is unknown; retrying with the same claim token is safe; "
              "the next call reconnects): " +
              message));
  }
  const char* state = result != nullptr ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
  throw Error(
      ErrorKind::k_ledger,
      scrub("PostgreSQL ledger " + m_redacted + ": " + what + " failed" +
            (state != nullptr ? std::string(" (SQLSTATE ") + state + ")" : "") + ": " + message));
}

std::vector<const char*> PostgresLedger::raw_params(const Params& params) {
  std::vector<const char*> raw;
  raw.reserve(params.size());
  for (const auto& param : params) {
    raw.push_back(param ? param->c_str() : nullptr);
  }
  return raw;
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
  if (uses == 0) {
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
