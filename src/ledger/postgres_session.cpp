// SPDX-License-Identifier: MIT
// The PostgreSQL ledger's session: connecting (or taking the connection opened ahead) and what it
// pipelines, answers read ahead while the caller works (the PostGIS load, the claim's
// confirmation and the next statements' PREPAREs). Statements and their errors are
// postgres_protocol.cpp's.
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
#include "pg/pg_handles.hpp"

namespace idem::ledger_detail {

namespace {

// What in a parsed DSN's address no server could answer, in words ("" when nothing): a port
// that is not a number from 1 to 65535, a host with brackets (a keyword string's hosts have
// none; an IPv6 address is bracketed only in a URI, which libpq has already unwrapped). libpq
// would find these only when connecting, and say so as it says "the server is down".
std::string malformed_address(const PQconninfoOption* options) {
  for (const PQconninfoOption* option = options; option->keyword != nullptr; ++option) {
    if (option->val == nullptr) {
      continue;
    }
    const std::string keyword = option->keyword;
    const std::string value = option->val;
    if (keyword == "port") {
      size_t start = 0;
      while (start <= value.size()) {
        const size_t end = std::min(value.find(',', start), value.size());
        const std::string one = value.substr(start, end - start);
        const bool digits =
            !one.empty() && one.size() <= 5 &&
            std::all_of(one.begin(), one.end(), [](char c) { return c >= '0' && c <= '9'; });
        if (!one.empty() && (!digits || std::stoi(one) < 1 || std::stoi(one) > 65535)) {
          return "a port that is not a number from 1 to 65535";
        }
        start = end + 1;
      }
    } else if ((keyword == "host" || keyword == "hostaddr") &&
               value.find_first_of("[]") != std::string::npos) {
      return "a host with a bracket (write an IPv6 address bare in a keyword string, "
             "bracketed only in a postgresql:// URI)";
    }
  }
  return "";
}

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
  // A DSN libpq cannot read names no ledger: the user's to fix (exit 2), not a server that
  // cannot be reached now. libpq's reason quotes the DSN, so it is scrubbed like the rest.
  std::string unreadable;
  const pg::ConninfoOptions options = pg::parse_conninfo(m_dsn, &unreadable);
  if (!options) {
    throw Error(ErrorKind::k_ledger,
                scrub("the ledger DSN " + m_redacted + " is not one libpq can read (" + unreadable +
                      "): correct --ledger or IDEM_LEDGER"));
  }
  if (const std::string wrong = malformed_address(options.get()); !wrong.empty()) {
    throw Error(ErrorKind::k_ledger, scrub("the ledger DSN " + m_redacted + " has " + wrong +
                                           ": correct --ledger or IDEM_LEDGER"));
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
      throw LedgerUnreachable("cannot connect to the PostgreSQL ledger " + m_redacted +
                              ": timeout expired");
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
    throw LedgerUnreachable(
        scrub("cannot connect to the PostgreSQL ledger " + m_redacted + ": " + message));
  }
  ++m_connections;
  if (opened_ahead) {
    ++m_connections_opened_ahead;
    CPLDebug("IDEM", "ledger %s: using the connection opened ahead", m_redacted.c_str());
  }
  PQsetNoticeReceiver(connection.get(), &forward_warnings, nullptr);
  m_connection = std::move(connection);
  if (m_read_only) {
    begin_read_only_transaction();
  }
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
  if (m_read_only || !m_has_footprint || m_postgis_load != PostgisLoad::k_not_started) {
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

}  // namespace idem::ledger_detail
