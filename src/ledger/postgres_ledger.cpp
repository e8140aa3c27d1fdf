// SPDX-License-Identifier: MIT
// The PostgreSQL ledger backend (libpq): many machines, one server clock. Objects live in the
// `idem` schema; claims are one INSERT ... ON CONFLICT ... RETURNING statement, completion one
// statement with the supersession in a data-modifying CTE. This file holds what workers call
// (postgres_ledger.hpp says where the rest is).

#include "ledger/postgres_ledger.hpp"

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
#include "ledger/caller_transaction.hpp"

namespace idem::ledger_detail {

PostgresLedger::PostgresLedger(const std::string& dsn, bool read_only)
    : m_read_only(read_only),
      m_dsn(dsn),
      m_redacted(Ledger::redact_dsn(dsn)),
      m_secrets(dsn_secrets(dsn)),
      m_digest_cache(*this) {
  std::lock_guard<std::mutex> lock(m_mutex);
  connect();
  open_schema();
}

LedgerStats PostgresLedger::stats() const {
  LedgerStats stats;
  stats.connections = m_connections.load();
  stats.connections_opened_ahead = m_connections_opened_ahead.load();
  stats.claims_confirmed_by_rewrite = m_claims_confirmed_by_rewrite.load();
  stats.statements_found_prepared = m_statements_found_prepared.load();
  stats.digest_lookups_answered_ahead = m_digest_lookups_answered_ahead.load();
  return stats;
}

bool PostgresLedger::has_footprints() {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_has_footprint;
}

ClaimResult PostgresLedger::claim(const ClaimRequest& request) {
  std::lock_guard<std::mutex> lock(m_mutex);
  ensure_connected();
  return with_footprint_fallback([&] { return claim_locked(request, false); });
}

ClaimResult PostgresLedger::claim_unless_completed(const ClaimRequest& request) {
  return claim_unless_completed(request, nullptr);
}

ClaimResult PostgresLedger::claim_unless_completed(const ClaimRequest& request,
                                                   const std::function<void()>& meanwhile) {
  std::lock_guard<std::mutex> lock(m_mutex);
  ensure_connected();
  std::function<void()> once = meanwhile;  // taken by the first statement sent
  return with_footprint_fallback([&] { return claim_locked(request, true, &once); });
}

// Whether a claim that its caller will confirm commits without waiting for the flush
// (IDEM_DURABLE_CLAIM=YES: it waits, as every other claim does).
bool PostgresLedger::claims_may_wait_for_confirmation() {
  return !CPLTestBool(CPLGetConfigOption("IDEM_DURABLE_CLAIM", "NO"));
}

bool PostgresLedger::confirm_claim(const std::string& work_key, const std::string& claim_token) {
  std::lock_guard<std::mutex> lock(m_mutex);
  auto found = m_confirmations.find(claim_token);
  if (found == m_confirmations.end()) {
    return true;  // a claim durable when made
  }
  if (found->second == Confirmation::k_pending) {
    finish_prepare_ahead();  // reads the confirmation's answer
    found = m_confirmations.find(claim_token);
  }
  if (found->second == Confirmation::k_confirmed) {
    m_confirmations.erase(found);
    return true;
  }
  CPLDebug("IDEM", "ledger: confirming the claim by rewriting its row");
  ++m_claims_confirmed_by_rewrite;
  ensure_connected();
  PgResult result = exec_statement("idem_confirm_claim", k_confirm_claim_sql,
                                   {work_key, claim_token}, "confirming the claim");
  m_confirmations.erase(claim_token);
  return affected(result) == 1;
}

// `unless_completed`: the first round runs the claim behind a look at the row
// (m_claim_unless_completed_sql), so completed work is answered in the same round trip;
// `meanwhile` (when set) runs while the server works on it.
ClaimResult PostgresLedger::claim_locked(const ClaimRequest& request, bool unless_completed,
                                         std::function<void()>* meanwhile) {
  Params params = {
      request.work_key,
      request.namespace_name,
      request.layer,
      request.tile ? std::optional<std::string>(std::to_string(request.tile->z)) : std::nullopt,
      request.tile ? std::optional<std::string>(std::to_string(request.tile->x)) : std::nullopt,
      request.tile ? std::optional<std::string>(std::to_string(request.tile->y)) : std::nullopt,
      std::to_string(request.lease.count()),
      request.claim_token,
      request.worker_host,
      std::to_string(request.worker_pid),
      request.output_uri,
      request.work_json};
  if (m_has_footprint) {
    params.push_back(footprint_ewkt(request.footprint_wkt));
  }
  const bool deferred = request.confirm_before_publishing && claims_may_wait_for_confirmation();
  const auto attempt = [&](int round) -> std::optional<ClaimResult> {
    const bool guarded = unless_completed && round == 0;
    PgResult claimed =
        guarded ? exec_statement(claim_unless_completed_name(deferred),
                                 claim_unless_completed_sql(deferred), params, "claim", meanwhile)
                : exec_statement("idem_claim", m_claim_sql, params, "claim");
    if (PQntuples(claimed.get()) != 1) {
      return std::nullopt;
    }
    LedgerRow row = make_row(ResultRow(claimed.get(), 0));
    // The guarded statement's last column tells a claim from the completed row it found.
    if (guarded && std::strcmp(PQgetvalue(claimed.get(), 0, k_claimed_flag_column), "t") != 0) {
      return claim_result(ClaimOutcome::k_completed, std::move(row));
    }
    ClaimResult result = claim_result(ClaimOutcome::k_claimed, std::move(row));
    prepare_ahead(guarded && deferred ? result.claim_token : std::string());
    return result;
  };
  return run_claim_rounds(attempt, [&] { return lookup_locked(request.work_key); });
}

bool PostgresLedger::heartbeat(const std::string& work_key, const std::string& claim_token,
                               std::chrono::seconds lease) {
  std::lock_guard<std::mutex> lock(m_mutex);
  ensure_connected();
  PgResult result =
      exec_statement("idem_heartbeat", k_heartbeat_sql,
                     {work_key, claim_token, std::to_string(lease.count())}, "heartbeat");
  return affected(result) == 1;
}

bool PostgresLedger::complete(const std::string& work_key, const std::string& claim_token,
                              const OutputFingerprint& fingerprint,
                              std::optional<int64_t> feature_count) {
  std::lock_guard<std::mutex> lock(m_mutex);
  ensure_connected();
  m_confirmations.erase(claim_token);
  const CompletionStatement statement = completion_statement();
  PgResult result = exec_statement(
      statement.base_name, statement.sql,
      completion_params(work_key, claim_token, fingerprint, feature_count), "complete");
  if (std::string(PQgetvalue(result.get(), 0, 0)) == "1") {
    return true;
  }
  // Nothing in flight under this token: a retry of a completion that did commit is true.
  PgResult done =
      exec_statement("idem_completed_by", k_completed_by_sql, {work_key, claim_token}, "complete");
  return PQntuples(done.get()) == 1;
}

bool PostgresLedger::release(const std::string& work_key, const std::string& claim_token) {
  std::lock_guard<std::mutex> lock(m_mutex);
  ensure_connected();
  m_confirmations.erase(claim_token);
  return affected(exec_statement("idem_release", k_release_sql, {work_key, claim_token},
                                 "release")) == 1;
}

bool PostgresLedger::invalidate(const std::string& work_key, const std::string& observed_token) {
  std::lock_guard<std::mutex> lock(m_mutex);
  ensure_connected();
  return affected(exec_statement("idem_invalidate", k_invalidate_sql, {work_key, observed_token},
                                 "invalidate")) == 1;
}

bool PostgresLedger::replace_etag(const std::string& work_key, const std::string& observed_token,
                                  const std::string& predicted, const std::string& store_etag) {
  std::lock_guard<std::mutex> lock(m_mutex);
  ensure_connected();
  return affected(exec_statement("idem_replace_etag", k_replace_etag_sql,
                                 {work_key, observed_token, predicted, store_etag},
                                 "recording the store's ETag")) == 1;
}

LedgerRow PostgresLedger::lookup(const std::string& work_key) {
  std::lock_guard<std::mutex> lock(m_mutex);
  ensure_connected();
  return lookup_locked(work_key).value_or(absent_row(work_key));
}

std::optional<std::string> PostgresLedger::database_identity() {
  std::lock_guard<std::mutex> lock(m_mutex);
  ensure_connected();
  return database_identity_of(m_connection.get());
}

// The fenced completion statement of complete(), on the caller's connection and inside its
// transaction; errors leave that transaction aborted (the caller rolls back).
bool PostgresLedger::complete_in_transaction(PGconn* connection, const std::string& work_key,
                                             const std::string& claim_token,
                                             const OutputFingerprint& fingerprint,
                                             std::optional<int64_t> feature_count) {
  if (connection == nullptr || PQtransactionStatus(connection) != PQTRANS_INTRANS) {
    throw Error(ErrorKind::k_ledger,
                "complete_in_transaction needs a transaction open (BEGIN "
                "done, no error) on the caller's connection");
  }
  const std::optional<std::string> ours = database_identity();
  if (database_identity_of(connection) != *ours) {
    throw Error(ErrorKind::k_ledger, "the connection is not to the ledger's database " +
                                         m_redacted + ": complete in the ledger instead");
  }
  auto run = [&](const char* sql, const Params& params) {
    const std::vector<const char*> raw = raw_params(params);
    PgResult result(PQexecParams(connection, sql, static_cast<int>(raw.size()), nullptr, raw.data(),
                                 nullptr, nullptr, 0));
    if (!result || PQresultStatus(result.get()) != PGRES_TUPLES_OK) {
      std::string message =
          result ? PQresultErrorMessage(result.get()) : PQerrorMessage(connection);
      throw Error(ErrorKind::k_ledger, scrub("PostgreSQL ledger " + m_redacted +
                                             ": completion in the caller's transaction "
                                             "failed: " +
                                             message));
    }
    return result;
  };
  PgResult result =
      run(k_complete_sql, completion_params(work_key, claim_token, fingerprint, feature_count));
  if (std::string(PQgetvalue(result.get(), 0, 0)) == "1") {
    return true;
  }
  PgResult done = run(k_completed_by_sql, {work_key, claim_token});
  return PQntuples(done.get()) == 1;
}

std::optional<std::string> PostgresLedger::digest_get(const std::string& path,
                                                      const FileIdentity& identity) {
  std::lock_guard<std::mutex> lock(m_mutex);
  ensure_connected();
  PgResult result = exec_statement("idem_digest_get", k_digest_get_sql,
                                   with_identity(path, identity), "digest cache lookup");
  if (PQntuples(result.get()) == 0) {
    start_postgis_load();  // the caller now hashes the source: the load runs meanwhile
    return std::nullopt;
  }
  return std::string(PQgetvalue(result.get(), 0, 0));
}

std::map<std::string, std::string> PostgresLedger::digest_get_many(
    const std::vector<DigestCache::Entry>& entries) {
  std::map<std::string, std::string> found;
  if (entries.empty()) {
    return found;
  }
  std::map<std::string, Params> wanted;  // path -> its identity as the statements write it
  std::vector<std::string> paths;
  for (const auto& [path, identity] : entries) {
    if (wanted.emplace(path, with_identity(path, identity)).second) {
      paths.push_back(path);
    }
  }
  std::lock_guard<std::mutex> lock(m_mutex);
  ensure_connected();
  PgResult ahead = std::move(m_read_ahead.answer);
  const bool answered_ahead =
      ahead && std::all_of(paths.begin(), paths.end(), [&](const std::string& path) {
        return m_read_ahead.paths.count(path) != 0;
      });
  m_read_ahead = ReadAhead{};
  PgResult result = answered_ahead
                        ? std::move(ahead)
                        : exec_statement("idem_digest_get_many", k_digest_get_many_sql,
                                         {text_array_literal(paths)}, "digest cache lookup");
  if (answered_ahead) {
    ++m_digest_lookups_answered_ahead;
  }
  CPLDebug("IDEM", "digest cache: %zu entries %s", paths.size(),
           answered_ahead ? "answered by the read ahead" : "read");
  for (int row = 0; row < PQntuples(result.get()); ++row) {
    const auto entry = wanted.find(PQgetvalue(result.get(), row, 0));
    bool same = entry != wanted.end();
    for (int column = 1; same && column <= 5; ++column) {
      same = entry->second[column] == PQgetvalue(result.get(), row, column);
    }
    if (same) {
      found.emplace(entry->first, PQgetvalue(result.get(), row, 6));
    }
  }
  // No PostGIS load started here: the caller asks for what was missing one by one right
  // away, and digest_get starts it when that misses, ahead of the work it then does.
  return found;
}

// Sends the digest_get_many query for `paths` without waiting; the next call on the
// connection collects the answer (finish_read_ahead), which the next digest_get_many uses when
// it asks for no other path. Any failure only loses the head start: the answer is dropped and
// digest_get_many asks again (reporting the error, if any, as usual).
void PostgresLedger::digest_read_ahead(const std::vector<std::string>& paths) {
  if (paths.empty()) {
    return;
  }
  std::lock_guard<std::mutex> lock(m_mutex);
  ensure_connected();
  m_read_ahead = ReadAhead{};
  const std::string array = text_array_literal(paths);
  const char* values[] = {array.c_str()};
  if (PQsendQueryParams(m_connection.get(), k_digest_get_many_sql, 1, nullptr, values, nullptr,
                        nullptr, 0) == 1) {
    m_read_ahead.paths.insert(paths.begin(), paths.end());
    m_read_ahead.pending = true;
  }
}

void PostgresLedger::finish_read_ahead() {
  if (!m_read_ahead.pending) {
    return;
  }
  m_read_ahead.pending = false;
  PgResult answer = take_answer();
  if (answer && PQresultStatus(answer.get()) == PGRES_TUPLES_OK) {
    m_read_ahead.answer = std::move(answer);
  }
}

void PostgresLedger::digest_put(const std::string& path, const FileIdentity& identity,
                                const std::string& digest) {
  std::lock_guard<std::mutex> lock(m_mutex);
  ensure_connected();
  Params params = with_identity(path, identity);
  params.push_back(digest);
  exec_statement("idem_digest_put", k_digest_put_sql, params, "digest cache store");
}

PostgresLedger::CompletionStatement PostgresLedger::completion_statement() {
  if (CPLTestBool(CPLGetConfigOption("IDEM_DURABLE_COMPLETION", "NO"))) {
    return {"idem_complete", k_complete_sql};
  }
  return {"idem_complete_async", k_complete_async_sql};
}

std::optional<LedgerRow> PostgresLedger::lookup_locked(const std::string& work_key) {
  static const std::string sql =
      std::string("SELECT ") + k_row_columns + " FROM idem.ledger WHERE work_key = $1";
  PgResult result = exec_statement("idem_lookup", sql, {work_key}, "lookup");
  if (PQntuples(result.get()) == 0) {
    return std::nullopt;
  }
  return make_row(ResultRow(result.get(), 0));
}

std::optional<std::string> PostgresDigestCache::get(const std::string& path,
                                                    const FileIdentity& identity) {
  return m_ledger.digest_get(path, identity);
}

void PostgresDigestCache::put(const std::string& path, const FileIdentity& identity,
                              const std::string& digest) {
  m_ledger.digest_put(path, identity, digest);
}

void PostgresDigestCache::read_ahead(const std::vector<std::string>& paths) {
  m_ledger.digest_read_ahead(paths);
}

std::map<std::string, std::string> PostgresDigestCache::get_many(
    const std::vector<Entry>& entries) {
  return m_ledger.digest_get_many(entries);
}

std::unique_ptr<Ledger> open_postgres_ledger(const std::string& dsn, bool read_only) {
  return std::make_unique<PostgresLedger>(dsn, read_only);
}

ConnectParameters connect_parameters(const std::string& dsn, bool skip_gss) {
  // Defaults first: the DSN (expanded from dbname) overrides them.
  ConnectParameters parameters;
  if (skip_gss) {
    parameters.keywords.push_back("gssencmode");
    parameters.values.push_back("disable");
  }
  parameters.keywords.insert(parameters.keywords.end(),
                             {"application_name", "connect_timeout", "dbname", nullptr});
  static const std::string timeout = std::to_string(k_default_connect_timeout_seconds);
  parameters.values.insert(parameters.values.end(),
                           {"gdal-idem", timeout.c_str(), dsn.c_str(), nullptr});
  return parameters;
}

void preopen_postgres_ledger(const std::string& dsn) {
  PostgresLedger::preopen(dsn);
}

}  // namespace idem::ledger_detail
