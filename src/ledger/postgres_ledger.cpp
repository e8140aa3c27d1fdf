// The PostgreSQL ledger backend (libpq): many machines, one server clock. Objects live in the
// `idem` schema; claims are one INSERT ... ON CONFLICT ... RETURNING statement, completion one
// statement with the supersession in a data-modifying CTE. Opening costs the connection and one
// query (applied schema versions, installed extensions); a statement is sent unprepared on its
// first use and prepared on its second, so a one-shot process pays no PREPARE round trips. A
// lost connection gives a clear error, and the next call reconnects.
#include <cpl_conv.h>
#include <cpl_error.h>
#include <cpl_string.h>
#include <libpq-fe.h>
#include <strings.h>

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
#include "base/pg_handles.hpp"
#include "ledger/caller_transaction.hpp"
#include "ledger/ledger.hpp"
#include "ledger/ledger_internal.hpp"

namespace idem {

namespace {

// pg_advisory_xact_lock key serialising concurrent migrations (any constant unique to us).
constexpr const char* k_migration_lock = "7306435217950412";
constexpr const char* k_insufficient_privilege = "42501";

constexpr const char* k_row_columns =
    "work_key, namespace, layer, tile_z, tile_x, tile_y, attempt, claim_token, worker_host, "
    "worker_pid, output_uri, output_size, output_mtime_ns, output_sha256, output_etag, "
    "output_members, feature_count, work_json, CAST(extract(epoch FROM claimed_at) AS float8), "
    "CAST(extract(epoch FROM lease_expires_at) AS float8), "
    "CAST(extract(epoch FROM completed_at) AS float8), "
    "CAST(extract(epoch FROM superseded_at) AS float8), "
    "CAST(extract(epoch FROM released_at) AS float8), "
    "CAST(extract(epoch FROM lease_expires_at - now()) AS float8)";

// After k_row_columns, the flag that claim_unless_completed's statement adds.
constexpr int k_claimed_flag_column = ledger_detail::k_col_lease_left + 1;

constexpr const char* k_history_columns =
    "work_key, namespace, layer, tile_z, tile_x, tile_y, claimed_at, lease_expires_at, "
    "completed_at, superseded_at, released_at, attempt, claim_token, worker_host, worker_pid, "
    "output_uri, output_size, output_mtime_ns, output_sha256, output_etag, feature_count, "
    "work_json, output_members";

// The rows a claim token holds: its claim, neither completed nor released (the fence of every
// statement that writes as the claim's holder).
#define IDEM_HELD_BY_TOKEN \
  "WHERE work_key = $1 AND claim_token = $2 AND completed_at IS NULL AND released_at IS NULL"

constexpr const char* k_heartbeat_sql =
    "UPDATE idem.ledger SET lease_expires_at = "
    "GREATEST(now() + make_interval(secs => $3), claimed_at) " IDEM_HELD_BY_TOKEN;

// complete()'s statement. The worker's own completion (k_complete_async_sql, the default) also
// turns synchronous_commit off for its transaction alone: the server acknowledges it before its
// write-ahead log reaches the disk. A completion lost in a crash of the server leaves the work in
// flight under a lease, so it is redone: never a completion of work that was not done.
// IDEM_DURABLE_COMPLETION=YES leaves the server's setting (docs/operations.md).
#define IDEM_COMPLETE_SQL                                                                 \
  "WITH done AS ("                                                                        \
  " UPDATE idem.ledger SET completed_at = GREATEST(now(), claimed_at), output_size = $3," \
  " output_mtime_ns = $4, output_sha256 = $5, output_etag = $6, feature_count = $7,"      \
  " output_members = $8"                                                                  \
  " " IDEM_HELD_BY_TOKEN                                                                  \
  " RETURNING output_uri, completed_at),"                                                 \
  " superseded AS ("                                                                      \
  " UPDATE idem.ledger AS older SET superseded_at = done.completed_at FROM done"          \
  " WHERE older.output_uri = done.output_uri AND older.work_key <> $1"                    \
  " AND older.completed_at IS NOT NULL AND older.superseded_at IS NULL RETURNING 1)"      \
  " SELECT (SELECT count(*) FROM done), (SELECT count(*) FROM superseded)"
constexpr const char* k_complete_sql = IDEM_COMPLETE_SQL;
constexpr const char* k_complete_async_sql =
    IDEM_COMPLETE_SQL ", set_config('synchronous_commit', 'off', true)";
#undef IDEM_COMPLETE_SQL

// What confirms a claim made without waiting for the flush of its commit (confirm_claim): sent
// on the claim's connection right after it, this transaction writes one record to the
// write-ahead log (a transactional logical message, which any role may emit and which changes no
// table; a transaction that writes nothing, such as one that only calls txid_current(), commits
// without a flush) and commits with the durability the session has: flushed, or replicated when
// synchronous_standby_names asks for it. A commit made durable makes every record written before
// it durable, the claim's too. So an answer read on that connection means the claim is on disk;
// no answer (the connection or the server lost) tells nothing.
constexpr const char* k_confirm_ahead_sql =
    "BEGIN;SELECT pg_logical_emit_message(true, 'gdal-idem', '');COMMIT;";
constexpr int k_confirm_ahead_results = 3;

// The confirmation when that answer is missing: the claim's row rewritten as it is, in a
// transaction of the session's durability. It finds the row only if the ledger still has the
// claim (a server that crashed before flushing it has not).
constexpr const char* k_confirm_claim_sql =
    "UPDATE idem.ledger SET lease_expires_at = lease_expires_at " IDEM_HELD_BY_TOKEN;

constexpr const char* k_completed_by_sql =
    "SELECT 1 FROM idem.ledger WHERE work_key = $1 AND claim_token = $2 "
    "AND completed_at IS NOT NULL";

constexpr const char* k_release_sql =
    "UPDATE idem.ledger SET lease_expires_at = GREATEST(now(), claimed_at), "
    "released_at = GREATEST(now(), claimed_at) " IDEM_HELD_BY_TOKEN;
#undef IDEM_HELD_BY_TOKEN

constexpr const char* k_invalidate_sql =
    "UPDATE idem.ledger SET completed_at = NULL, superseded_at = NULL, "
    "released_at = GREATEST(now(), claimed_at), lease_expires_at = GREATEST(now(), claimed_at), "
    "output_size = NULL, output_mtime_ns = NULL, output_sha256 = NULL, output_etag = NULL, "
    "output_members = NULL, feature_count = NULL WHERE work_key = $1 AND claim_token = $2 AND "
    "completed_at IS NOT NULL";

constexpr const char* k_replace_etag_sql =
    "UPDATE idem.ledger SET output_etag = $4 WHERE work_key = $1 AND claim_token = $2 "
    "AND completed_at IS NOT NULL AND output_etag = $3";

constexpr const char* k_forget_key_sql = "DELETE FROM idem.ledger WHERE work_key = $1";
constexpr const char* k_now_sql = "SELECT extract(epoch FROM now())::float8";

constexpr const char* k_digest_get_sql =
    "SELECT digest FROM idem.source_digest WHERE path = $1 AND device = $2 AND inode = $3 "
    "AND size = $4 AND mtime_ns = $5 AND ctime_ns = $6";

// The identities are compared by the caller (path is the key: one row per path at most).
constexpr const char* k_digest_get_many_sql =
    "SELECT path, device, inode, size, mtime_ns, ctime_ns, digest FROM idem.source_digest "
    "WHERE path = ANY ($1::text[])";

constexpr const char* k_digest_put_sql =
    "INSERT INTO idem.source_digest AS d (path, device, inode, size, mtime_ns, ctime_ns, digest) "
    "VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT ON CONSTRAINT source_digest_pk DO UPDATE SET "
    "device = EXCLUDED.device, inode = EXCLUDED.inode, size = EXCLUDED.size, "
    "mtime_ns = EXCLUDED.mtime_ns, ctime_ns = EXCLUDED.ctime_ns, digest = EXCLUDED.digest, "
    "recorded_at = now()";

// Everything open() needs to know, in one round trip: the applied versions (the query fails
// with undefined_table on an uninitialised database) and which of the extensions that
// conditional migrations require ($1, comma-separated) are installed. No catalog lookup of the
// footprint column: on a fresh connection that alone cost as much as the rest of the query.
constexpr const char* k_schema_versions_sql =
    "(SELECT string_agg(version::text, ',' ORDER BY version) FROM idem.schema_version)";
constexpr const char* k_schema_state_sql_rest =
    ", (SELECT string_agg(extname, ',') FROM pg_extension "
    "WHERE extname = ANY (string_to_array($1, ',')))"
    // The ledger's statements already prepared in this server session: an earlier client of a
    // pooler that keeps them (docs/operations.md) left them; their names carry a hash of their
    // text (statement_name), so a name found is the very statement.
    ", (SELECT string_agg(name, ',') FROM pg_prepared_statements WHERE name LIKE 'idem\\_%')";
// sql/postgres/0002_footprint.sql adds the footprint column (in the transaction that records
// its version): rows carry a footprint when this version is applied and PostGIS is still there
// (DROP EXTENSION postgis CASCADE drops the column but not the version's record).
constexpr int k_footprint_migration_version = 2;
// The migration whose column (output_members) every row statement names.
constexpr int k_output_members_version = 4;
constexpr const char* k_footprint_extension = "postgis";  // 0002's requires-extension
constexpr const char* k_footprint_column_exists_sql =
    "SELECT EXISTS (SELECT FROM pg_attribute WHERE attrelid = to_regclass('idem.ledger') "
    "AND attname = 'footprint' AND NOT attisdropped)";
constexpr const char* k_undefined_table = "42P01";
constexpr const char* k_invalid_schema_name = "3F000";
constexpr const char* k_duplicate_prepared_statement = "42P05";

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

// What one schema query says (see k_schema_versions_sql).
struct SchemaState {
  std::vector<int> versions;         // applied, ascending; empty when uninitialised
  std::set<std::string> extensions;  // installed, among those conditional migrations need
  bool has_footprint() const {
    return std::find(versions.begin(), versions.end(), k_footprint_migration_version) !=
               versions.end() &&
           extensions.count(k_footprint_extension) != 0;
  }
};

bool starts_with_word(const std::string& text, size_t at, const char* word) {
  const size_t length = std::strlen(word);
  return text.size() - at >= length && strncasecmp(text.c_str() + at, word, length) == 0;
}

// The claim's footprint as EWKT for the column geometry(MultiPolygon, 4326), bound as that
// column's type: PostGIS's geometry input parses it, so the statement calls no function and
// names no PostGIS schema. A POLYGON becomes the one-part MULTIPOLYGON that ST_Multi made of it;
// anything else goes as it is, for the server to accept or refuse.
std::optional<std::string> footprint_ewkt(const std::optional<std::string>& wkt) {
  if (!wkt) {
    return std::nullopt;
  }
  const size_t start = wkt->find_first_not_of(" \t\r\n");
  if (start == std::string::npos || starts_with_word(*wkt, start, "SRID=")) {
    return wkt;
  }
  std::string text = wkt->substr(start);
  if (starts_with_word(text, 0, "POLYGON")) {
    const size_t open = text.find('(');
    const size_t close = text.find_last_of(')');
    if (open != std::string::npos && close != std::string::npos && close > open) {
      text = "MULTIPOLYGON" + text.substr(7, open - 7) + "(" + text.substr(open, close - open + 1) +
             ")";
    }
  }
  return "SRID=4326;" + text;
}

std::vector<std::string> split_commas(const char* text) {
  std::vector<std::string> parts;
  std::string part;
  for (const char* c = text; *c != '\0'; ++c) {
    if (*c == ',') {
      parts.push_back(part);
      part.clear();
    } else {
      part += *c;
    }
  }
  if (!part.empty()) {
    parts.push_back(part);
  }
  return parts;
}

using PgConnection = pg::Connection;
using PgResult = pg::Result;

// Cells of one result row, for ledger_detail::make_row.
class ResultRow {
 public:
  ResultRow(const PGresult* result, int row) : m_result(result), m_row(row) {}
  bool is_null(int i) const { return PQgetisnull(m_result, m_row, i) != 0; }
  std::string text(int i) const { return PQgetvalue(m_result, m_row, i); }
  int64_t integer(int i) const { return std::strtoll(PQgetvalue(m_result, m_row, i), nullptr, 10); }
  double real(int i) const { return std::strtod(PQgetvalue(m_result, m_row, i), nullptr); }

 private:
  const PGresult* m_result;
  int m_row;
};

using Params = std::vector<std::optional<std::string>>;

std::optional<std::string> text_param(const std::optional<int64_t>& value) {
  return value ? std::optional<std::string>(std::to_string(*value)) : std::nullopt;
}

std::string identity_param(uint64_t value) {
  return std::to_string(static_cast<int64_t>(value));  // unsigned, stored bit for bit
}

// `first`, then a file identity as the digest statements take it ($2 to $6).
Params with_identity(std::string first, const FileIdentity& identity) {
  return {std::move(first),
          identity_param(identity.device),
          identity_param(identity.inode),
          std::to_string(identity.size),
          std::to_string(identity.mtime_ns),
          std::to_string(identity.ctime_ns)};
}

// A text[] literal: every element quoted, with '"' and '\\' escaped.
std::string text_array_literal(const std::vector<std::string>& items) {
  std::string literal = "{";
  for (std::size_t i = 0; i < items.size(); ++i) {
    literal += i > 0 ? ",\"" : "\"";
    for (char c : items[i]) {
      if (c == '"' || c == '\\') {
        literal += '\\';
      }
      literal += c;
    }
    literal += '"';
  }
  return literal + "}";
}

class PostgresLedger;

class PostgresDigestCache : public DigestCache {
 public:
  explicit PostgresDigestCache(PostgresLedger& ledger) : m_ledger(ledger) {}
  std::optional<std::string> get(const std::string& path, const FileIdentity& identity) override;
  void put(const std::string& path, const FileIdentity& identity,
           const std::string& digest) override;
  std::map<std::string, std::string> get_many(const std::vector<Entry>& entries) override;
  void read_ahead(const std::vector<std::string>& paths) override;

 private:
  PostgresLedger& m_ledger;
};

class PostgresLedger : public Ledger, public ledger_detail::CallerTransactionCompletion {
 public:
  explicit PostgresLedger(const std::string& dsn)
      : m_dsn(dsn),
        m_redacted(Ledger::redact_dsn(dsn)),
        m_secrets(dsn_secrets(dsn)),
        m_digest_cache(*this) {
    std::lock_guard<std::mutex> lock(m_mutex);
    connect();
    open_schema();
  }

  // Start connecting, and asking the schema query once connected, without waiting for the server
  // (postgres_preopen.cpp); the constructor takes the connection and the answer.
  static void preopen(const std::string& dsn) {
    ledger_detail::PostgresOpening opening;
    opening.skip_gss = ledger_detail::skip_gss_encryption(dsn);
    opening.connect_timeout = ledger_detail::connect_timeout_of(dsn);
    opening.query = schema_state_sql(true);
    opening.query_params = {required_extensions()};
    ledger_detail::start_postgres_preopen(dsn, std::move(opening));
  }

  std::string backend_name() const override { return "postgresql"; }

  MigrationReport migrate() override {
    std::lock_guard<std::mutex> lock(m_mutex);
    ensure_connected();
    return migrate_locked();
  }

  int schema_version() override {
    std::lock_guard<std::mutex> lock(m_mutex);
    ensure_connected();
    const SchemaState state = read_schema_state(false);
    return state.versions.empty() ? 0 : state.versions.back();
  }

  bool has_footprints() override {
    std::lock_guard<std::mutex> lock(m_mutex);
    return m_has_footprint;
  }

  ClaimResult claim(const ClaimRequest& request) override {
    std::lock_guard<std::mutex> lock(m_mutex);
    ensure_connected();
    return with_footprint_fallback([&] { return claim_locked(request, false); });
  }

  ClaimResult claim_unless_completed(const ClaimRequest& request) override {
    return claim_unless_completed(request, nullptr);
  }

  ClaimResult claim_unless_completed(const ClaimRequest& request,
                                     const std::function<void()>& meanwhile) override {
    std::lock_guard<std::mutex> lock(m_mutex);
    ensure_connected();
    std::function<void()> once = meanwhile;  // taken by the first statement sent
    return with_footprint_fallback([&] { return claim_locked(request, true, &once); });
  }

  // Whether a claim that its caller will confirm commits without waiting for the flush
  // (IDEM_DURABLE_CLAIM=YES: it waits, as every other claim does).
  static bool claims_may_wait_for_confirmation() {
    return !CPLTestBool(CPLGetConfigOption("IDEM_DURABLE_CLAIM", "NO"));
  }

  bool confirm_claim(const std::string& work_key, const std::string& claim_token) override {
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
    ensure_connected();
    PgResult result = exec_statement("idem_confirm_claim", k_confirm_claim_sql,
                                     {work_key, claim_token}, "confirming the claim");
    m_confirmations.erase(claim_token);
    return affected(result) == 1;
  }

  // `unless_completed`: the first round runs the claim behind a look at the row
  // (m_claim_unless_completed_sql), so completed work is answered in the same round trip;
  // `meanwhile` (when set) runs while the server works on it.
  ClaimResult claim_locked(const ClaimRequest& request, bool unless_completed,
                           std::function<void()>* meanwhile = nullptr) {
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
      LedgerRow row = ledger_detail::make_row(ResultRow(claimed.get(), 0));
      // The guarded statement's last column tells a claim from the completed row it found.
      if (guarded && std::strcmp(PQgetvalue(claimed.get(), 0, k_claimed_flag_column), "t") != 0) {
        return ledger_detail::claim_result(ClaimOutcome::k_completed, std::move(row));
      }
      ClaimResult result = ledger_detail::claim_result(ClaimOutcome::k_claimed, std::move(row));
      prepare_ahead(guarded && deferred ? result.claim_token : std::string());
      return result;
    };
    return ledger_detail::run_claim_rounds(attempt,
                                           [&] { return lookup_locked(request.work_key); });
  }

  bool heartbeat(const std::string& work_key, const std::string& claim_token,
                 std::chrono::seconds lease) override {
    std::lock_guard<std::mutex> lock(m_mutex);
    ensure_connected();
    PgResult result =
        exec_statement("idem_heartbeat", k_heartbeat_sql,
                       {work_key, claim_token, std::to_string(lease.count())}, "heartbeat");
    return affected(result) == 1;
  }

  bool complete(const std::string& work_key, const std::string& claim_token,
                const OutputFingerprint& fingerprint,
                std::optional<int64_t> feature_count) override {
    std::lock_guard<std::mutex> lock(m_mutex);
    ensure_connected();
    m_confirmations.erase(claim_token);
    const CompletionStatement statement = completion_statement();
    PgResult result =
        exec_statement(statement.base_name, statement.sql,
                       {work_key, claim_token, std::to_string(fingerprint.size),
                        std::to_string(fingerprint.mtime_ns), fingerprint.sha256, fingerprint.etag,
                        text_param(feature_count), fingerprint.members},
                       "complete");
    if (std::string(PQgetvalue(result.get(), 0, 0)) == "1") {
      return true;
    }
    // Nothing in flight under this token: a retry of a completion that did commit is true.
    PgResult done = exec_statement("idem_completed_by", k_completed_by_sql, {work_key, claim_token},
                                   "complete");
    return PQntuples(done.get()) == 1;
  }

  bool release(const std::string& work_key, const std::string& claim_token) override {
    std::lock_guard<std::mutex> lock(m_mutex);
    ensure_connected();
    m_confirmations.erase(claim_token);
    return affected(exec_statement("idem_release", k_release_sql, {work_key, claim_token},
                                   "release")) == 1;
  }

  bool invalidate(const std::string& work_key, const std::string& observed_token) override {
    std::lock_guard<std::mutex> lock(m_mutex);
    ensure_connected();
    return affected(exec_statement("idem_invalidate", k_invalidate_sql, {work_key, observed_token},
                                   "invalidate")) == 1;
  }

  bool replace_etag(const std::string& work_key, const std::string& observed_token,
                    const std::string& predicted, const std::string& store_etag) override {
    std::lock_guard<std::mutex> lock(m_mutex);
    ensure_connected();
    return affected(exec_statement("idem_replace_etag", k_replace_etag_sql,
                                   {work_key, observed_token, predicted, store_etag},
                                   "recording the store's ETag")) == 1;
  }

  LedgerRow lookup(const std::string& work_key) override {
    std::lock_guard<std::mutex> lock(m_mutex);
    ensure_connected();
    if (auto row = lookup_locked(work_key)) {
      return *row;
    }
    LedgerRow absent;
    absent.work_key = work_key;
    absent.state = RowState::k_absent;
    return absent;
  }

  int64_t forget_key(const std::string& work_key) override {
    std::lock_guard<std::mutex> lock(m_mutex);
    ensure_connected();
    return affected(exec_statement("idem_forget_key", k_forget_key_sql, {work_key}, "forget_key"));
  }

  DigestCache& digest_cache() override { return m_digest_cache; }

  std::vector<LedgerRow> rows(const RowFilter& filter) override {
    std::vector<LedgerRow> result;
    if (filter.state == RowState::k_absent) {
      return result;
    }
    Params params;
    std::string sql = std::string("SELECT ") + k_row_columns + " FROM idem.ledger WHERE " +
                      filter_conditions(filter, params) + " ORDER BY work_key";
    if (filter.limit) {
      params.push_back(std::to_string(*filter.limit));
      sql += " LIMIT $" + std::to_string(params.size());
    }
    std::lock_guard<std::mutex> lock(m_mutex);
    ensure_connected();
    PgResult rows = exec_params(sql, params, "rows");
    result.reserve(static_cast<size_t>(PQntuples(rows.get())));
    for (int i = 0; i < PQntuples(rows.get()); ++i) {
      result.push_back(ledger_detail::make_row(ResultRow(rows.get(), i)));
    }
    return result;
  }

  LedgerCounts counts(const RowFilter& filter) override {
    RowFilter scope;
    scope.namespace_name = filter.namespace_name;
    scope.layer = filter.layer;
    Params params;
    const std::string sql =
        "SELECT count(*) FILTER (WHERE completed_at IS NOT NULL AND superseded_at IS NULL), "
        "count(*) FILTER (WHERE superseded_at IS NOT NULL), "
        "count(*) FILTER (WHERE completed_at IS NULL AND released_at IS NULL "
        "AND lease_expires_at > now()), "
        "count(*) FILTER (WHERE completed_at IS NULL AND (released_at IS NOT NULL "
        "OR lease_expires_at <= now())), "
        "CAST(extract(epoch FROM min(claimed_at) FILTER (WHERE completed_at IS NULL)) AS float8), "
        "count(*) FILTER (WHERE completed_at >= now() - interval '1 hour') "
        "FROM idem.ledger WHERE " +
        filter_conditions(scope, params);
    std::lock_guard<std::mutex> lock(m_mutex);
    ensure_connected();
    PgResult result = exec_params(sql, params, "counts");
    const ResultRow cells(result.get(), 0);
    LedgerCounts counts;
    counts.completed = cells.integer(0);
    counts.superseded = cells.integer(1);
    counts.in_flight = cells.integer(2);
    counts.stale = cells.integer(3);
    if (!cells.is_null(4)) {
      counts.oldest_in_flight_claimed_at = cells.real(4);
    }
    counts.completed_last_hour = cells.integer(5);
    return counts;
  }

  std::vector<LedgerRow> history(const RowFilter& filter) override {
    std::vector<LedgerRow> result;
    const auto scope = ledger_detail::history_scope(filter);
    if (!scope) {
      return result;
    }
    Params params;
    std::string sql = std::string("SELECT ") + k_row_columns + " FROM idem.ledger_history WHERE " +
                      filter_conditions(*scope, params) + " ORDER BY work_key, completed_at";
    if (filter.limit) {
      params.push_back(std::to_string(*filter.limit));
      sql += " LIMIT $" + std::to_string(params.size());
    }
    std::lock_guard<std::mutex> lock(m_mutex);
    ensure_connected();
    PgResult rows = exec_params(sql, params, "history");
    for (int i = 0; i < PQntuples(rows.get()); ++i) {
      result.push_back(ledger_detail::make_row(ResultRow(rows.get(), i)));
    }
    return result;
  }

  std::vector<LedgerRow> forget_rows(const RowFilter& filter) override {
    const RowFilter scope = ledger_detail::forget_scope(filter);
    Params params;
    const std::string sql = std::string("DELETE FROM idem.ledger WHERE ") +
                            filter_conditions(scope, params) + " RETURNING " + k_row_columns;
    std::lock_guard<std::mutex> lock(m_mutex);
    ensure_connected();
    PgResult rows = exec_params(sql, params, "forget");
    std::vector<LedgerRow> result;
    result.reserve(static_cast<size_t>(PQntuples(rows.get())));
    for (int i = 0; i < PQntuples(rows.get()); ++i) {
      result.push_back(ledger_detail::make_row(ResultRow(rows.get(), i)));
    }
    return result;
  }

  bool forget_completed(const std::string& work_key, const std::string& observed_token) override {
    std::lock_guard<std::mutex> lock(m_mutex);
    ensure_connected();
    return affected(exec_params("DELETE FROM idem.ledger WHERE work_key = $1 AND claim_token = $2 "
                                "AND completed_at IS NOT NULL",
                                {work_key, observed_token}, "forget_completed")) == 1;
  }

  int64_t archive(const ArchiveRequest& request) override {
    std::lock_guard<std::mutex> lock(m_mutex);
    ensure_connected();
    return with_footprint_fallback([&] { return archive_locked(request); });
  }

  int64_t archive_locked(const ArchiveRequest& request) {
    std::string columns = k_history_columns;
    if (m_has_footprint) {
      columns += ", footprint";
    }
    Params params = {std::to_string(request.older_than.value_or(std::chrono::seconds(0)).count())};
    std::string where = request.older_than ? "completed_at < now() - make_interval(secs => $1)"
                                           : "completed_at <= now() - make_interval(secs => $1)";
    if (request.namespace_name) {
      params.push_back(*request.namespace_name);
      where += " AND namespace = $2";
    }
    if (request.superseded_only) {
      where += " AND superseded_at IS NOT NULL";
    }
    Transaction transaction(*this, "archive");
    // now() is fixed for the transaction: the partitions and the move use the same cutoff.
    exec_params("SELECT idem.ensure_history_partitions(now() + interval '1 second')", {},
                "archive");
    PgResult moved =
        exec_params("WITH moved AS (DELETE FROM idem.ledger WHERE " + where + " RETURNING " +
                        columns + ") INSERT INTO idem.ledger_history (" + columns +
                        ", archived_at) SELECT " + columns + ", now() FROM moved",
                    params, "archive");
    transaction.commit();
    return affected(moved);
  }

  int64_t drop_history(std::chrono::seconds older_than,
                       const std::optional<std::string>& namespace_name) override {
    Params params = {std::to_string(older_than.count())};
    std::string sql =
        "DELETE FROM idem.ledger_history WHERE completed_at < now() - make_interval(secs => $1)";
    if (namespace_name) {
      params.push_back(*namespace_name);
      sql += " AND namespace = $2";
    }
    std::lock_guard<std::mutex> lock(m_mutex);
    ensure_connected();
    return affected(exec_params(sql, params, "drop_history"));
  }

  double now() override {
    std::lock_guard<std::mutex> lock(m_mutex);
    ensure_connected();
    PgResult result = exec_statement("idem_now", k_now_sql, {}, "now");
    return std::strtod(PQgetvalue(result.get(), 0, 0), nullptr);
  }

  std::optional<std::string> database_identity() override {
    std::lock_guard<std::mutex> lock(m_mutex);
    ensure_connected();
    return database_identity_of(m_connection.get());
  }

  // The fenced completion statement of complete(), on the caller's connection and inside its
  // transaction; errors leave that transaction aborted (the caller rolls back).
  bool complete_in_transaction(PGconn* connection, const std::string& work_key,
                               const std::string& claim_token, const OutputFingerprint& fingerprint,
                               std::optional<int64_t> feature_count) override {
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
      PgResult result(PQexecParams(connection, sql, static_cast<int>(raw.size()), nullptr,
                                   raw.data(), nullptr, nullptr, 0));
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
        run(k_complete_sql, {work_key, claim_token, std::to_string(fingerprint.size),
                             std::to_string(fingerprint.mtime_ns), fingerprint.sha256,
                             fingerprint.etag, text_param(feature_count), fingerprint.members});
    if (std::string(PQgetvalue(result.get(), 0, 0)) == "1") {
      return true;
    }
    PgResult done = run(k_completed_by_sql, {work_key, claim_token});
    return PQntuples(done.get()) == 1;
  }

  std::optional<std::string> digest_get(const std::string& path, const FileIdentity& identity) {
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

  std::map<std::string, std::string> digest_get_many(
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
  void digest_read_ahead(const std::vector<std::string>& paths) {
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

  void finish_read_ahead() {
    if (!m_read_ahead.pending) {
      return;
    }
    m_read_ahead.pending = false;
    PgResult answer = take_answer();
    if (answer && PQresultStatus(answer.get()) == PGRES_TUPLES_OK) {
      m_read_ahead.answer = std::move(answer);
    }
  }

  void digest_put(const std::string& path, const FileIdentity& identity,
                  const std::string& digest) {
    std::lock_guard<std::mutex> lock(m_mutex);
    ensure_connected();
    Params params = with_identity(path, identity);
    params.push_back(digest);
    exec_statement("idem_digest_put", k_digest_put_sql, params, "digest cache store");
  }

 private:
  // BEGIN ... COMMIT on this connection; rolls back unless committed.
  class Transaction {
   public:
    Transaction(PostgresLedger& ledger, const char* what) : m_ledger(ledger), m_what(what) {
      m_ledger.exec_params("BEGIN", {}, m_what);
    }
    ~Transaction() {
      if (!m_committed && m_ledger.m_connection &&
          PQstatus(m_ledger.m_connection.get()) == CONNECTION_OK) {
        PgResult ignored(PQexec(m_ledger.m_connection.get(), "ROLLBACK"));
      }
    }
    Transaction(const Transaction&) = delete;
    Transaction& operator=(const Transaction&) = delete;
    void commit() {
      m_ledger.exec_params("COMMIT", {}, m_what);
      m_committed = true;
    }

   private:
    PostgresLedger& m_ledger;
    const char* m_what;
    bool m_committed = false;
  };

  // The message on one line (libpq's are multi-line), without the password.
  std::string scrub(const std::string& message) const {
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

  void connect() {
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
    const bool skip_gss = ledger_detail::skip_gss_encryption(m_dsn);
    auto connect_now = [this](bool without_gss) {
      const auto parameters = ledger_detail::connect_parameters(m_dsn, without_gss);
      return PgConnection(
          PQconnectdbParams(parameters.keywords.data(), parameters.values.data(), 1));
    };
    // The connection that Ledger::preopen started for this DSN, if any (with the answer to the
    // schema query, which open_schema() takes); else one made now, the same way.
    PgConnection connection;
    bool opened_ahead = false;
    if (auto preopened = ledger_detail::take_postgres_preopened(m_dsn)) {
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
    if (opened_ahead) {
      CPLDebug("IDEM", "ledger %s: using the connection opened ahead", m_redacted.c_str());
    }
    PQsetNoticeReceiver(connection.get(), &forward_warnings, nullptr);
    m_connection = std::move(connection);
  }

  // Reconnect once when the previous call lost the connection (and re-read the schema, which a
  // migration may have changed meanwhile).
  void ensure_connected() {
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
  void start_postgis_load() {
    if (!m_has_footprint || m_postgis_load != PostgisLoad::k_not_started) {
      return;
    }
    const char* values[] = {"SRID=4326;MULTIPOLYGON EMPTY"};
    if (PQsendQueryParams(m_connection.get(), "UPDATE idem.ledger SET footprint = $1 WHERE false",
                          1, nullptr, values, nullptr, nullptr, 0) == 1) {
      m_postgis_load = PostgisLoad::k_pending;
    }
  }

  void finish_postgis_load() {
    if (m_postgis_load != PostgisLoad::k_pending) {
      return;
    }
    m_postgis_load = PostgisLoad::k_done;
    PgResult answer = take_answer();
    if (answer && PQresultStatus(answer.get()) != PGRES_COMMAND_OK) {
      CPLDebug("IDEM", "PostGIS load ahead of the claim: %s", PQresultErrorMessage(answer.get()));
    }
  }

  // complete()'s statement, as IDEM_DURABLE_COMPLETION chooses it.
  struct CompletionStatement {
    const char* base_name;
    const char* sql;
  };
  static CompletionStatement completion_statement() {
    if (CPLTestBool(CPLGetConfigOption("IDEM_DURABLE_COMPLETION", "NO"))) {
      return {"idem_complete", k_complete_sql};
    }
    return {"idem_complete_async", k_complete_async_sql};
  }

  // Right after a claim, while its work runs: the claim made without waiting for its flush is
  // confirmed (`confirm_token` set: k_confirm_ahead_sql), the completion this process sends next
  // is prepared, and in a server session that keeps prepared statements (a pooler's, see
  // m_session_keeps_statements) the first claim too, for the next client. One query, not waited
  // for; finish_prepare_ahead reads its answer before the next statement. A statement prepared
  // costs the server no more than one sent unprepared; in a kept session, later clients skip
  // its parsing, and once it has run a few times PostgreSQL may reuse a generic plan.
  void prepare_ahead(const std::string& confirm_token) {
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
      wanted.emplace_back(statement_name(claim_unless_completed_name(deferred),
                                         claim_unless_completed_sql(deferred)),
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

  void finish_prepare_ahead() {
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
        confirmed = index == first_prepare - 1 && ok &&
                    std::strcmp(PQcmdStatus(result.get()), "COMMIT") == 0;
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
  PgResult take_answer() {
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

  [[noreturn]] void fail(const PGresult* result, const std::string& what) {
    std::string message = result != nullptr ? PQresultErrorMessage(result) : "";
    if (message.empty()) {
      message = PQerrorMessage(m_connection.get());
    }
    while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) {
      message.pop_back();
    }
    if (PQstatus(m_connection.get()) != CONNECTION_OK) {
      throw Error(ErrorKind::k_ledger,
                  scrub("the connection to the PostgreSQL ledger " + m_redacted +
                        " was lost during " + what +
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

  static std::vector<const char*> raw_params(const Params& params) {
    std::vector<const char*> raw;
    raw.reserve(params.size());
    for (const auto& param : params) {
      raw.push_back(param ? param->c_str() : nullptr);
    }
    return raw;
  }

  PgResult checked(PGresult* raw, const std::string& what) {
    PgResult result(raw);
    const ExecStatusType status = result ? PQresultStatus(result.get()) : PGRES_FATAL_ERROR;
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
      fail(result.get(), what);
    }
    return result;
  }

  PgResult exec_prepared(const char* name, const Params& params, const std::string& what) {
    const std::vector<const char*> raw = raw_params(params);
    return checked(PQexecPrepared(m_connection.get(), name, static_cast<int>(raw.size()),
                                  raw.data(), nullptr, nullptr, 0),
                   what);
  }

  PgResult exec_params(const std::string& sql, const Params& params, const std::string& what) {
    const std::vector<const char*> raw = raw_params(params);
    return checked(PQexecParams(m_connection.get(), sql.c_str(), static_cast<int>(raw.size()),
                                nullptr, raw.data(), nullptr, nullptr, 0),
                   what);
  }

  static int64_t affected(const PgResult& result) {
    const char* tuples = PQcmdTuples(result.get());
    return tuples[0] == '\0' ? 0 : std::strtoll(tuples, nullptr, 10);
  }

  // Sends a statement (`name` prepared, else `sql` with its parameters), runs `meanwhile` (taken:
  // it runs once) while the server works on it, then reads the answer. An exception from
  // `meanwhile` is rethrown once the answer has been read.
  PgResult exec_overlapped(const char* name, const std::string& sql, const Params& params,
                           const std::string& what, std::function<void()>& meanwhile) {
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
  static std::string statement_name(const char* base_name, const std::string& sql) {
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
  PgResult exec_statement(const char* base_name, const std::string& sql, const Params& params,
                          const std::string& what, std::function<void()>* meanwhile = nullptr) {
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

  static std::string schema_state_sql(bool initialised) {
    return std::string("SELECT ") + (initialised ? k_schema_versions_sql : "NULL::text") +
           k_schema_state_sql_rest;
  }

  static const std::string& required_extensions() {
    static const std::string names = [] {
      std::string joined;
      for (const Migration& migration : migrations("postgresql")) {
        if (migration.requires_extension) {
          joined += (joined.empty() ? "" : ",") + *migration.requires_extension;
        }
      }
      return joined;
    }();
    return names;
  }

  // The schema as it stands, in one query. Outside a transaction an uninitialised database is
  // told by the query's undefined_table error (no extra round trip in the common case); inside
  // one (migrations), where an error would abort the transaction, the table is looked up first.
  SchemaState read_schema_state(bool in_transaction) {
    bool initialised = true;
    if (in_transaction) {
      PgResult exists = exec_params("SELECT to_regclass('idem.schema_version') IS NOT NULL", {},
                                    "reading the schema version");
      initialised = std::string(PQgetvalue(exists.get(), 0, 0)) == "t";
    }
    PgResult result;
    if (m_first_schema_answer && !in_transaction) {
      result = std::move(m_first_schema_answer);  // asked by the connection opened ahead
    } else {
      const std::string sql = schema_state_sql(initialised);
      const Params params = {required_extensions()};
      const std::vector<const char*> raw = raw_params(params);
      result.reset(PQexecParams(m_connection.get(), sql.c_str(), static_cast<int>(raw.size()),
                                nullptr, raw.data(), nullptr, nullptr, 0));
    }
    m_first_schema_answer.reset();
    SchemaState state;
    if (result && PQresultStatus(result.get()) == PGRES_FATAL_ERROR && !in_transaction &&
        PQstatus(m_connection.get()) == CONNECTION_OK) {
      const char* code = PQresultErrorField(result.get(), PG_DIAG_SQLSTATE);
      if (code != nullptr && (std::strcmp(code, k_undefined_table) == 0 ||
                              std::strcmp(code, k_invalid_schema_name) == 0)) {
        return state;  // uninitialised: open() migrates, which reads the rest
      }
    }
    result = checked(result.release(), "reading the schema version");
    const ResultRow cells(result.get(), 0);
    if (!cells.is_null(0)) {
      for (const std::string& version : split_commas(PQgetvalue(result.get(), 0, 0))) {
        state.versions.push_back(std::atoi(version.c_str()));
      }
    }
    if (!cells.is_null(1)) {
      for (const std::string& name : split_commas(PQgetvalue(result.get(), 0, 1))) {
        state.extensions.insert(name);
      }
    }
    if (!cells.is_null(2)) {
      const std::vector<std::string> names = split_commas(PQgetvalue(result.get(), 0, 2));
      for (const std::string& name : names) {
        m_statement_uses[name] = 2;
      }
      if (!m_session_keeps_statements) {
        m_session_keeps_statements = true;
        CPLDebug("IDEM", "ledger: %zu of its statements already prepared in this server session",
                 names.size());
      }
    }
    return state;
  }

  // In the migration's transaction: a footprint migration whose column is gone (PostGIS was
  // dropped with CASCADE) is recorded as not applied, so that it applies again once PostGIS is
  // installed.
  void forget_lost_footprint(SchemaState& state) {
    auto applied =
        std::find(state.versions.begin(), state.versions.end(), k_footprint_migration_version);
    if (applied == state.versions.end()) {
      return;
    }
    PgResult exists = exec_params(k_footprint_column_exists_sql, {}, "migration");
    if (std::string(PQgetvalue(exists.get(), 0, 0)) == "t") {
      return;
    }
    exec_params("DELETE FROM idem.schema_version WHERE version = $1",
                {std::to_string(k_footprint_migration_version)}, "migration");
    state.versions.erase(applied);
  }

  // Pending migrations that can apply now (conditional ones only when their extension exists).
  static std::vector<Migration> applicable_migrations(const SchemaState& state,
                                                      MigrationReport* report) {
    std::vector<Migration> pending;
    for (Migration& migration : migrations("postgresql")) {
      if (std::find(state.versions.begin(), state.versions.end(), migration.version) !=
          state.versions.end()) {
        continue;
      }
      if (migration.requires_extension &&
          state.extensions.count(*migration.requires_extension) == 0) {
        if (report != nullptr) {
          report->skipped.push_back(migration.name);
        }
        continue;
      }
      pending.push_back(std::move(migration));
    }
    return pending;
  }

  MigrationReport migrate_locked() {
    MigrationReport report;
    {
      Transaction transaction(*this, "migration");
      exec_params("SELECT pg_advisory_xact_lock($1)", {std::string(k_migration_lock)}, "migration");
      SchemaState state = read_schema_state(true);
      forget_lost_footprint(state);
      for (const Migration& migration : applicable_migrations(state, &report)) {
        checked(PQexec(m_connection.get(), migration.sql.c_str()), "migration " + migration.name);
        exec_params("INSERT INTO idem.schema_version (version, name) VALUES ($1, $2)",
                    {std::to_string(migration.version), migration.name}, "migration");
        report.applied.push_back(migration.name);
      }
      transaction.commit();
    }
    if (!report.applied.empty() && !m_statement_uses.empty()) {
      // The columns may have changed (footprint): statements are sent afresh.
      checked(PQexec(m_connection.get(), "DEALLOCATE ALL"), "migration");
      m_statement_uses.clear();
    }
    const SchemaState state = read_schema_state(false);
    report.schema_version = state.versions.empty() ? 0 : state.versions.back();
    use_schema(state);
    return report;
  }

  // Runs `work`, a statement that writes or copies footprints when m_has_footprint, and once
  // more without them if it failed because the footprint column is gone.
  template <class Work>
  auto with_footprint_fallback(Work work) -> decltype(work()) {
    try {
      return work();
    } catch (const Error&) {
      if (!m_has_footprint || !footprint_column_lost()) {
        throw;
      }
      return work();
    }
  }

  // After a statement failed on a schema with footprints: whether the column was dropped
  // meanwhile (DROP EXTENSION postgis CASCADE). If so, work goes on without footprints on this
  // connection, and `gdal-idem init` is what brings the column back.
  bool footprint_column_lost() {
    if (!m_connection || PQstatus(m_connection.get()) != CONNECTION_OK) {
      return false;
    }
    PgResult exists(PQexec(m_connection.get(), k_footprint_column_exists_sql));
    if (!exists || PQresultStatus(exists.get()) != PGRES_TUPLES_OK ||
        std::string(PQgetvalue(exists.get(), 0, 0)) != "f") {
      return false;
    }
    CPLError(CE_Warning, CPLE_AppDefined,
             "IDEM: the PostgreSQL ledger %s has lost its footprint column (PostGIS dropped "
             "with CASCADE?); work goes on without footprints. Run `gdal-idem init` once PostGIS "
             "is installed again to restore them.",
             m_redacted.c_str());
    SchemaState without = read_schema_state(false);
    without.extensions.erase(k_footprint_extension);
    use_schema(without);
    return true;
  }

  // On open: one query; migrations only when something is pending, and then only when this
  // user may apply them (a worker role without DDL rights keeps working on an initialised
  // schema).
  void open_schema() {
    const SchemaState state = read_schema_state(false);
    if (applicable_migrations(state, nullptr).empty()) {
      use_schema(state);
      return;
    }
    try {
      migrate_locked();
    } catch (const Error& error) {
      if (PQstatus(m_connection.get()) != CONNECTION_OK) {
        throw;
      }
      const SchemaState existing = read_schema_state(false);
      if (existing.versions.empty()) {
        throw Error(ErrorKind::k_ledger,
                    std::string("the PostgreSQL ledger ") + m_redacted +
                        " has no idem schema and this user cannot create it; run `gdal-idem "
                        "init` as the schema owner (" +
                        error.what() + ")");
      }
      use_schema(existing);
    }
  }

  // The claim statement follows the schema: with PostGIS, the footprint too.
  void use_schema(const SchemaState& state) {
    if (std::find(state.versions.begin(), state.versions.end(), k_output_members_version) ==
        state.versions.end()) {
      // Every statement that reads or writes a row names the column it adds.
      throw Error(ErrorKind::k_ledger,
                  "the PostgreSQL ledger " + m_redacted + " lacks migration " +
                      std::to_string(k_output_members_version) +
                      " (output_members: the files of each output), which this build needs and "
                      "this role may not apply: run `gdal-idem init` as the ledger's owner, then "
                      "run again (docs/operations.md, upgrading)");
    }
    m_has_footprint = state.has_footprint();
    std::string columns =
        "work_key, namespace, layer, tile_z, tile_x, tile_y, claimed_at, "
        "lease_expires_at, attempt, claim_token, worker_host, worker_pid, "
        "output_uri, work_json";
    std::string values =
        "$1, $2, $3, $4, $5, $6, now(), now() + make_interval(secs => $7), 1, "
        "$8, $9, $10, $11, $12";
    std::string footprint_update;
    if (m_has_footprint) {
      // $13 takes the column's type (footprint_ewkt): no PostGIS function, whatever the
      // search_path.
      columns += ", footprint";
      values += ", $13";
      footprint_update = ", footprint = EXCLUDED.footprint";
    }
    const std::string on_conflict =
        " ON CONFLICT ON CONSTRAINT ledger_pk DO UPDATE SET "
        "namespace = EXCLUDED.namespace, layer = EXCLUDED.layer, tile_z = EXCLUDED.tile_z, "
        "tile_x = EXCLUDED.tile_x, tile_y = EXCLUDED.tile_y, claimed_at = EXCLUDED.claimed_at, "
        "lease_expires_at = EXCLUDED.lease_expires_at, completed_at = NULL, "
        "superseded_at = NULL, released_at = NULL, "
        "attempt = CASE WHEN l.claim_token = EXCLUDED.claim_token THEN l.attempt "
        "ELSE l.attempt + 1 END, claim_token = EXCLUDED.claim_token, "
        "worker_host = EXCLUDED.worker_host, worker_pid = EXCLUDED.worker_pid, "
        "output_uri = EXCLUDED.output_uri, work_json = EXCLUDED.work_json, output_size = NULL, "
        "output_mtime_ns = NULL, output_sha256 = NULL, output_etag = NULL, "
        "output_members = NULL, feature_count = NULL" +
        footprint_update +
        " WHERE (l.completed_at IS NULL AND (l.lease_expires_at <= now() "
        "OR l.claim_token = EXCLUDED.claim_token)) OR l.superseded_at IS NOT NULL "
        "RETURNING " +
        k_row_columns;
    const std::string claim_sql =
        "INSERT INTO idem.ledger AS l (" + columns + ") VALUES (" + values + ")" + on_conflict;
    // The same claim, attempted only when the row is not completed: a completed row is
    // returned as it stands (flag false), read in the statement's snapshot, and neither
    // updated nor locked. A completion committed after the snapshot makes the claim return
    // nothing, as the plain claim does.
    // `condition` is added to the claim's own: the deferred one's set_config runs only when the
    // claim is attempted (the answer "completed" writes nothing).
    const auto claim_unless_completed = [&](const char* condition) {
      return std::string("WITH current AS (SELECT ") + k_row_columns +
             ", false FROM idem.ledger WHERE work_key = $1 AND completed_at IS NOT NULL "
             "AND superseded_at IS NULL), claimed AS (INSERT INTO idem.ledger AS l (" +
             columns + ") SELECT " + values + " WHERE NOT EXISTS (SELECT FROM current)" +
             condition + on_conflict +
             ", true) SELECT * FROM claimed UNION ALL SELECT * FROM current";
    };
    forget_prepared_if_changed("idem_claim", m_claim_sql, claim_sql);
    forget_prepared_if_changed("idem_claim_unless_completed", m_claim_unless_completed_sql,
                               claim_unless_completed(""));
    forget_prepared_if_changed(
        "idem_claim_unless_deferred", m_claim_unless_completed_deferred_sql,
        claim_unless_completed(" AND set_config('synchronous_commit', 'off', true) IS NOT NULL"));
  }

  const char* claim_unless_completed_name(bool deferred) const {
    return deferred ? "idem_claim_unless_deferred" : "idem_claim_unless_completed";
  }
  const std::string& claim_unless_completed_sql(bool deferred) const {
    return deferred ? m_claim_unless_completed_deferred_sql : m_claim_unless_completed_sql;
  }

  // A statement's text changed with the schema's shape: the new text has a name of its own
  // (statement_name), and the old one, if prepared on this connection, is deallocated.
  void forget_prepared_if_changed(const char* base_name, std::string& current,
                                  const std::string& sql) {
    if (sql == current) {
      return;
    }
    if (!current.empty()) {
      const std::string name = statement_name(base_name, current);
      const auto prepared = m_statement_uses.find(name);
      if (prepared != m_statement_uses.end() && prepared->second == 2) {
        checked(PQexec(m_connection.get(), ("DEALLOCATE " + name).c_str()), "reading the schema");
      }
      m_statement_uses.erase(name);
    }
    current = sql;
  }

  // The WHERE clause's shape follows the filter (so the partial indexes serve expired_only and
  // in_flight_or_retried); every value is a parameter appended to `params`.
  static std::string filter_conditions(const Ledger::RowFilter& filter, Params& params) {
    std::string sql = "true";
    auto add = [&](const char* condition, const std::string& value) {
      params.push_back(value);
      const std::string placeholder = "$" + std::to_string(params.size());
      std::string text = condition;
      for (size_t at = text.find('?'); at != std::string::npos; at = text.find('?', at)) {
        text.replace(at, 1, placeholder);
        at += placeholder.size();
      }
      sql += " AND " + text;
    };
    if (filter.namespace_name) {
      add("namespace = ?", *filter.namespace_name);
    }
    if (filter.layer) {
      add("layer = ?", *filter.layer);
    }
    if (filter.output_uri) {
      add("output_uri = ?", *filter.output_uri);
    }
    if (filter.work_key) {
      add("work_key = ?", *filter.work_key);
    }
    if (filter.work_key_prefix) {
      add("left(work_key, length(?::text)) = ?", *filter.work_key_prefix);
    }
    if (filter.state == RowState::k_completed) {
      sql += " AND completed_at IS NOT NULL";
    }
    if (filter.state == RowState::k_in_flight || filter.expired_only) {
      sql += " AND completed_at IS NULL";
    }
    if (filter.expired_only) {
      sql += " AND lease_expires_at <= now()";
    }
    if (filter.in_flight_or_retried) {
      // Spelled as the predicate of ledger_in_flight_or_retried_idx (0003_reap_index.sql).
      sql += " AND (completed_at IS NULL OR attempt > 1)";
    }
    if (filter.after_work_key) {
      add("work_key > ?", *filter.after_work_key);
    }
    return sql;
  }

  std::optional<LedgerRow> lookup_locked(const std::string& work_key) {
    static const std::string sql =
        std::string("SELECT ") + k_row_columns + " FROM idem.ledger WHERE work_key = $1";
    PgResult result = exec_statement("idem_lookup", sql, {work_key}, "lookup");
    if (PQntuples(result.get()) == 0) {
      return std::nullopt;
    }
    return ledger_detail::make_row(ResultRow(result.get(), 0));
  }

  std::string m_dsn;
  std::string m_redacted;
  std::vector<std::string> m_secrets;
  std::mutex m_mutex;
  PgConnection m_connection;
  PgResult m_first_schema_answer;  // from the connection opened ahead, until read
  // Statement name -> uses on this connection (1: sent unprepared once, 2: prepared).
  std::unordered_map<std::string, int> m_statement_uses;
  std::string m_claim_sql;
  std::string m_claim_unless_completed_sql;
  // The same, committed without waiting for the flush (claims that their caller confirms).
  std::string m_claim_unless_completed_deferred_sql;
  bool m_has_footprint = false;
  enum class PostgisLoad { k_not_started, k_pending, k_done };
  PostgisLoad m_postgis_load = PostgisLoad::k_not_started;  // on this connection
  // digest_read_ahead's query: sent (pending), then its answer, kept for digest_get_many.
  struct ReadAhead {
    std::set<std::string> paths;
    bool pending = false;
    PgResult answer;
  };
  ReadAhead m_read_ahead;
  // The server session had statements of the ledger prepared when this connection began: its
  // pooler keeps them between clients, so preparing one serves the clients after this one.
  bool m_session_keeps_statements = false;
  // prepare_ahead's PREPAREs, sent in one query while the work runs (pending: their answers not
  // read yet), in the order of `names`.
  struct PrepareAhead {
    std::vector<std::string> names;
    std::string confirm_token;  // the claim it confirms first (k_confirm_ahead_sql), if any
    bool pending = false;
  };
  PrepareAhead m_prepare_ahead;
  // Claims made without waiting for their flush, by token, until confirm_claim, complete or
  // release: k_pending while prepare_ahead's confirmation is unread, k_unknown when it is
  // missing (not sent, failed, or lost with its connection).
  enum class Confirmation { k_pending, k_confirmed, k_unknown };
  std::unordered_map<std::string, Confirmation> m_confirmations;
  PostgresDigestCache m_digest_cache;
};

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

}  // namespace

namespace ledger_detail {

std::unique_ptr<Ledger> open_postgres_ledger(const std::string& dsn) {
  return std::make_unique<PostgresLedger>(dsn);
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

}  // namespace ledger_detail

}  // namespace idem
