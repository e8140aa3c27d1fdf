// SPDX-License-Identifier: MIT
// The SQLite ledger backend: the embedded default for one machine and many processes. WAL, a busy
// timeout on every connection, claims as one UPSERT ... RETURNING statement, multi-statement
// changes under BEGIN IMMEDIATE, so contention waits instead of failing. Times come from
// SQLite's clock inside the statements ("the database clock" of a one-machine ledger).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>

#include "base/error.hpp"
#include "ledger/ledger.hpp"
#include "ledger/ledger_internal.hpp"
#include "ledger/sqlite_utils.hpp"

namespace idem {

namespace {

using sqlite::Query;

// Unix seconds (UTC, millisecond resolution); 'now' is fixed within one sqlite3_step().
#define IDEM_SQLITE_NOW "((julianday('now') - 2440587.5) * 86400.0)"

constexpr int k_busy_timeout_ms = 60000;

bool has_schema_version_table(sqlite::Database& db) {
  Query query(db,
              "SELECT 1 FROM sqlite_master WHERE type = 'table' "
              "AND name = 'schema_version'");
  return query.step();
}

std::vector<int> applied_versions(sqlite::Database& db) {
  std::vector<int> versions;
  if (!has_schema_version_table(db)) {
    return versions;
  }
  Query query(db, "SELECT version FROM schema_version ORDER BY version");
  while (query.step()) {
    versions.push_back(static_cast<int>(query.integer(0)));
  }
  return versions;
}

// Whether `path` is an SQLite database in WAL mode (its header's write version is 2). Read
// without blocking: a FIFO named as the ledger is not waited on.
bool is_wal_database(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    return false;
  }
  unsigned char header[20] = {};
  struct stat info {};
  const bool read = ::fstat(fd, &info) == 0 && S_ISREG(info.st_mode) &&
                    ::pread(fd, header, sizeof(header), 0) == static_cast<ssize_t>(sizeof(header));
  ::close(fd);
  return read && std::memcmp(header, "SQLite format 3", 16) == 0 && header[18] == 2;
}

// A read-only command's first look at `path` (invariant I4: it creates no file). SQLite makes a
// WAL database's -wal and -shm when it opens it, even read-only, which would leave them beside a
// file that is not a ledger (a GeoPackage in WAL mode named by mistake). Where no -wal is there
// (no writer has the file open), the file is looked at first without creating anything, and
// refused, as it was, when it is not a ledger.
const std::string& looked_at(const std::string& path, bool read_only) {
  struct stat wal {};
  if (read_only && is_wal_database(path) && ::lstat((path + "-wal").c_str(), &wal) != 0) {
    sqlite::Database look(path, "SQLite ledger " + path,
                          std::chrono::milliseconds(k_busy_timeout_ms),
                          sqlite::Database::Access::k_look_only);
    const std::vector<int> applied = applied_versions(look);
    if (applied.empty()) {
      ledger_detail::check_schema_version("sqlite:" + path, "sqlite", applied, true);
    }
  }
  return path;
}

#define IDEM_SQLITE_ROW_COLUMNS                                                             \
  "work_key, namespace, layer, tile_z, tile_x, tile_y, attempt, claim_token, worker_host, " \
  "worker_pid, output_uri, output_size, output_mtime_ns, output_sha256, output_etag, "      \
  "output_members, feature_count, work_json, claimed_at, lease_expires_at, completed_at, "  \
  "superseded_at, "                                                                         \
  "released_at, lease_expires_at - " IDEM_SQLITE_NOW

constexpr const char* k_row_columns = IDEM_SQLITE_ROW_COLUMNS;

constexpr const char* k_history_columns =
    "work_key, namespace, layer, tile_z, tile_x, tile_y, claimed_at, lease_expires_at, "
    "completed_at, superseded_at, released_at, attempt, claim_token, worker_host, worker_pid, "
    "output_uri, output_size, output_mtime_ns, output_sha256, output_etag, feature_count, "
    "work_json, output_members";

constexpr const char* k_claim_sql =
    "INSERT INTO ledger (work_key, namespace, layer, tile_z, tile_x, tile_y, claimed_at, "
    "lease_expires_at, attempt, claim_token, worker_host, worker_pid, output_uri, work_json) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, " IDEM_SQLITE_NOW ", " IDEM_SQLITE_NOW
    " + ?7, 1, ?8, ?9, "
    "?10, ?11, ?12) "
    "ON CONFLICT (work_key) DO UPDATE SET "
    "namespace = excluded.namespace, layer = excluded.layer, tile_z = excluded.tile_z, "
    "tile_x = excluded.tile_x, tile_y = excluded.tile_y, claimed_at = excluded.claimed_at, "
    "lease_expires_at = excluded.lease_expires_at, completed_at = NULL, superseded_at = NULL, "
    "released_at = NULL, "
    "attempt = CASE WHEN ledger.claim_token = excluded.claim_token THEN ledger.attempt "
    "ELSE ledger.attempt + 1 END, "
    "claim_token = excluded.claim_token, worker_host = excluded.worker_host, "
    "worker_pid = excluded.worker_pid, output_uri = excluded.output_uri, "
    "work_json = excluded.work_json, output_size = NULL, output_mtime_ns = NULL, "
    "output_sha256 = NULL, output_etag = NULL, output_members = NULL, feature_count = NULL "
    "WHERE (ledger.completed_at IS NULL AND (ledger.lease_expires_at <= excluded.claimed_at "
    "OR ledger.claim_token = excluded.claim_token)) OR ledger.superseded_at IS NOT NULL "
    "RETURNING " IDEM_SQLITE_ROW_COLUMNS;

constexpr const char* k_heartbeat_sql =
    "UPDATE ledger SET lease_expires_at = max(" IDEM_SQLITE_NOW
    " + ?3, claimed_at) "
    "WHERE work_key = ?1 AND claim_token = ?2 AND completed_at IS NULL AND released_at IS NULL";

constexpr const char* k_complete_sql =
    "UPDATE ledger SET completed_at = max(" IDEM_SQLITE_NOW
    ", claimed_at), output_size = ?3, "
    "output_mtime_ns = ?4, output_sha256 = ?5, output_etag = ?6, feature_count = ?7, "
    "output_members = ?8 "
    "WHERE work_key = ?1 AND claim_token = ?2 AND completed_at IS NULL AND released_at IS NULL "
    "RETURNING output_uri, completed_at";

constexpr const char* k_supersede_sql =
    "UPDATE ledger SET superseded_at = ?3 WHERE output_uri = ?1 AND work_key <> ?2 "
    "AND completed_at IS NOT NULL AND superseded_at IS NULL";

constexpr const char* k_completed_by_sql =
    "SELECT 1 FROM ledger WHERE work_key = ?1 AND claim_token = ?2 AND completed_at IS NOT NULL";

constexpr const char* k_release_sql =
    "UPDATE ledger SET lease_expires_at = max(" IDEM_SQLITE_NOW
    ", claimed_at), "
    "released_at = max(" IDEM_SQLITE_NOW
    ", claimed_at) "
    "WHERE work_key = ?1 AND claim_token = ?2 AND completed_at IS NULL AND released_at IS NULL";

constexpr const char* k_invalidate_sql =
    "UPDATE ledger SET completed_at = NULL, superseded_at = NULL, "
    "released_at = max(" IDEM_SQLITE_NOW
    ", claimed_at), "
    "lease_expires_at = max(" IDEM_SQLITE_NOW
    ", claimed_at), output_size = NULL, "
    "output_mtime_ns = NULL, output_sha256 = NULL, output_etag = NULL, output_members = NULL, "
    "feature_count = NULL WHERE work_key = ?1 AND claim_token = ?2 AND completed_at IS NOT NULL";

constexpr const char* k_replace_etag_sql =
    "UPDATE ledger SET output_etag = ?4 WHERE work_key = ?1 AND claim_token = ?2 "
    "AND completed_at IS NOT NULL AND output_etag = ?3";

constexpr const char* k_digest_get_sql =
    "SELECT digest FROM source_digest WHERE path = ?1 AND device = ?2 AND inode = ?3 "
    "AND size = ?4 AND mtime_ns = ?5 AND ctime_ns = ?6";

constexpr const char* k_digest_put_sql =
    "INSERT INTO source_digest (path, device, inode, size, mtime_ns, ctime_ns, digest, "
    "recorded_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, " IDEM_SQLITE_NOW
    ") "
    "ON CONFLICT (path) DO UPDATE SET device = excluded.device, inode = excluded.inode, "
    "size = excluded.size, mtime_ns = excluded.mtime_ns, ctime_ns = excluded.ctime_ns, "
    "digest = excluded.digest, recorded_at = excluded.recorded_at";

class SqliteLedger;

class SqliteDigestCache : public DigestCache {
 public:
  explicit SqliteDigestCache(SqliteLedger& ledger) : m_ledger(ledger) {}
  std::optional<std::string> get(const std::string& path, const FileIdentity& identity) override;
  void put(const std::string& path, const FileIdentity& identity,
           const std::string& digest) override;

 private:
  SqliteLedger& m_ledger;
};

class SqliteLedger final : public Ledger {
 public:
  SqliteLedger(const std::string& path, bool read_only)
      : m_path(looked_at(path, read_only)),
        m_db(path, "SQLite ledger " + path, std::chrono::milliseconds(k_busy_timeout_ms),
             read_only ? sqlite::Database::Access::k_read_only
                       : sqlite::Database::Access::k_read_write),
        m_digest_cache(*this) {
    // Looked at before anything is written: a database that is not a ledger (a GeoPackage named
    // by mistake) is refused as it was, and so is a schema newer than this release.
    std::vector<int> applied = applied_versions();
    // Read again when tables are found: another worker's migration (tables and versions in one
    // transaction) may have committed between the two reads.
    if (!read_only && applied.empty() && holds_tables() && (applied = applied_versions()).empty()) {
      throw Error(ErrorKind::k_ledger,
                  path +
                      " is an SQLite database that is not an IDEM ledger (it holds other "
                      "tables and no schema_version): check --ledger or IDEM_LEDGER; nothing "
                      "was changed");
    }
    ledger_detail::check_schema_version("sqlite:" + path, "sqlite", applied, read_only);
    if (read_only) {
      return;  // no WAL switch, no migration (invariant I4)
    }
    m_db.keep_wal_on_close();
    m_db.exec_waiting("PRAGMA journal_mode = WAL");
    // WAL + NORMAL: durable across process crashes; a power loss may roll back the last commits
    // (the work is then redone), never corrupts.
    m_db.exec("PRAGMA synchronous = NORMAL");
    // Every worker process is usually the ledger's only connection when it opens it, so SQLite
    // rebuilds its WAL index by reading the whole write-ahead log; processes exit without a
    // final checkpoint. Checkpointing at 64 pages (instead of 1000) keeps that read short (an
    // order of magnitude, bench/RESULTS.md); a checkpoint (a few pages and two cheap fsyncs) then
    // runs once every dozen or so workers.
    m_db.exec("PRAGMA wal_autocheckpoint = 64");
    if (pending_migrations()) {
      SqliteLedger::migrate();  // this class is final: no other override to miss
    }
  }

  std::string backend_name() const override { return "sqlite"; }

  MigrationReport migrate() override {
    std::lock_guard<std::mutex> lock(m_mutex);
    MigrationReport report;
    sqlite::Transaction transaction(m_db);
    const std::vector<int> applied = applied_versions();
    for (const Migration& migration : migrations("sqlite")) {
      if (std::find(applied.begin(), applied.end(), migration.version) != applied.end()) {
        continue;
      }
      if (migration.requires_extension) {
        report.skipped.push_back(migration.name);
        continue;
      }
      m_db.exec(migration.sql, "migration " + migration.name);
      Query insert(m_db,
                   "INSERT INTO schema_version (version, name) "
                   "VALUES (?1, ?2)");
      insert.bind(1, static_cast<int64_t>(migration.version)).bind(2, migration.name).run();
      report.applied.push_back(migration.name);
    }
    transaction.commit();
    report.schema_version = schema_version_locked();
    return report;
  }

  int schema_version() override {
    std::lock_guard<std::mutex> lock(m_mutex);
    return schema_version_locked();
  }

  bool has_footprints() override { return false; }

  ClaimResult claim(const ClaimRequest& request) override {
    std::lock_guard<std::mutex> lock(m_mutex);
    const auto attempt = [&](int /*round*/) -> std::optional<ClaimResult> {
      Query query(m_db, k_claim_sql);
      query.bind(1, request.work_key).bind(2, request.namespace_name).bind(3, request.layer);
      if (request.tile) {
        query.bind(4, static_cast<int64_t>(request.tile->z))
            .bind(5, static_cast<int64_t>(request.tile->x))
            .bind(6, static_cast<int64_t>(request.tile->y));
      }
      query.bind(7, static_cast<double>(request.lease.count()))
          .bind(8, request.claim_token)
          .bind(9, request.worker_host)
          .bind(10, request.worker_pid)
          .bind(11, request.output_uri)
          .bind(12, request.work_json);
      if (!query.step()) {
        return std::nullopt;
      }
      ClaimResult result =
          ledger_detail::claim_result(ClaimOutcome::k_claimed, ledger_detail::make_row(query));
      query.run();
      return result;
    };
    return ledger_detail::run_claim_rounds(attempt,
                                           [&] { return lookup_locked(request.work_key); });
  }

  bool heartbeat(const std::string& work_key, const std::string& claim_token,
                 std::chrono::seconds lease) override {
    std::lock_guard<std::mutex> lock(m_mutex);
    Query query(m_db, k_heartbeat_sql);
    query.bind(1, work_key).bind(2, claim_token).bind(3, static_cast<double>(lease.count()));
    query.run();
    return m_db.changes() == 1;
  }

  bool complete(const std::string& work_key, const std::string& claim_token,
                const OutputFingerprint& fingerprint,
                std::optional<int64_t> feature_count) override {
    std::lock_guard<std::mutex> lock(m_mutex);
    sqlite::Transaction transaction(m_db);
    std::string output_uri;
    double completed_at = 0;
    {
      Query query(m_db, k_complete_sql);
      query.bind(1, work_key)
          .bind(2, claim_token)
          .bind(3, fingerprint.size)
          .bind(4, fingerprint.mtime_ns)
          .bind(5, fingerprint.sha256)
          .bind(6, fingerprint.etag)
          .bind(7, feature_count)
          .bind(8, fingerprint.members);
      if (!query.step()) {
        // Nothing in flight under this token: a retry of a completion that did commit is true.
        Query done(m_db, k_completed_by_sql);
        done.bind(1, work_key).bind(2, claim_token);
        return done.step();
      }
      output_uri = query.text(0);
      completed_at = query.real(1);
      query.run();
    }
    Query supersede(m_db, k_supersede_sql);
    supersede.bind(1, output_uri).bind(2, work_key).bind(3, completed_at).run();
    transaction.commit();
    return true;
  }

  bool release(const std::string& work_key, const std::string& claim_token) override {
    return fenced_update(k_release_sql, work_key, claim_token);
  }

  bool invalidate(const std::string& work_key, const std::string& observed_token) override {
    return fenced_update(k_invalidate_sql, work_key, observed_token);
  }

  bool replace_etag(const std::string& work_key, const std::string& observed_token,
                    const std::string& predicted, const std::string& store_etag) override {
    std::lock_guard<std::mutex> lock(m_mutex);
    Query query(m_db, k_replace_etag_sql);
    query.bind(1, work_key).bind(2, observed_token).bind(3, predicted).bind(4, store_etag).run();
    return m_db.changes() == 1;
  }

  LedgerRow lookup(const std::string& work_key) override {
    std::lock_guard<std::mutex> lock(m_mutex);
    return lookup_locked(work_key).value_or(ledger_detail::absent_row(work_key));
  }

  int64_t forget_key(const std::string& work_key) override {
    std::lock_guard<std::mutex> lock(m_mutex);
    Query query(m_db, "DELETE FROM ledger WHERE work_key = ?1");
    query.bind(1, work_key).run();
    return m_db.changes();
  }

  DigestCache& digest_cache() override { return m_digest_cache; }

  std::vector<LedgerRow> rows(const RowFilter& filter) override {
    std::vector<LedgerRow> result;
    if (filter.state == RowState::k_absent) {
      return result;
    }
    const std::string sql = std::string("SELECT ") + k_row_columns + " FROM ledger WHERE " +
                            filter_conditions(filter) + " ORDER BY work_key LIMIT ?7";
    std::lock_guard<std::mutex> lock(m_mutex);
    Query query(m_db, sql);
    bind_filter(query, filter);
    query.bind(7, filter.limit.value_or(-1));
    while (query.step()) {
      result.push_back(ledger_detail::make_row(query));
    }
    return result;
  }

  LedgerCounts counts(const RowFilter& filter) override {
    RowFilter scope;
    scope.namespace_name = filter.namespace_name;
    scope.layer = filter.layer;
    const std::string sql =
        "SELECT coalesce(sum(completed_at IS NOT NULL AND superseded_at IS NULL), 0), "
        "coalesce(sum(superseded_at IS NOT NULL), 0), "
        "coalesce(sum(completed_at IS NULL AND released_at IS NULL AND lease_expires_at "
        "> " IDEM_SQLITE_NOW
        "), 0), "
        "coalesce(sum(completed_at IS NULL AND released_at IS NULL AND lease_expires_at "
        "<= " IDEM_SQLITE_NOW
        "), 0), "
        "min(CASE WHEN completed_at IS NULL AND released_at IS NULL THEN claimed_at END), "
        "coalesce(sum(completed_at >= " IDEM_SQLITE_NOW
        " - 3600.0), 0), "
        "coalesce(sum(completed_at IS NULL AND released_at IS NOT NULL), 0) FROM ledger WHERE " +
        filter_conditions(scope);
    std::lock_guard<std::mutex> lock(m_mutex);
    Query query(m_db, sql);
    bind_filter(query, scope);
    LedgerCounts counts;
    if (query.step()) {
      counts = ledger_detail::make_counts(query);
      query.run();
    }
    return counts;
  }

  std::vector<LedgerRow> history(const RowFilter& filter) override {
    std::vector<LedgerRow> result;
    const auto scope = ledger_detail::history_scope(filter);
    if (!scope) {
      return result;
    }
    const std::string sql = std::string("SELECT ") + k_row_columns + " FROM ledger_history WHERE " +
                            filter_conditions(*scope) + " ORDER BY work_key, completed_at LIMIT ?7";
    std::lock_guard<std::mutex> lock(m_mutex);
    Query query(m_db, sql);
    bind_filter(query, *scope);
    query.bind(7, filter.limit.value_or(-1));
    while (query.step()) {
      result.push_back(ledger_detail::make_row(query));
    }
    return result;
  }

  std::vector<LedgerRow> forget_rows(const RowFilter& filter) override {
    const RowFilter scope = ledger_detail::forget_scope(filter);
    const std::string sql = std::string("DELETE FROM ledger WHERE ") + filter_conditions(scope) +
                            " RETURNING " + k_row_columns;
    std::lock_guard<std::mutex> lock(m_mutex);
    sqlite::Transaction transaction(m_db);
    std::vector<LedgerRow> result;
    {
      Query query(m_db, sql);
      bind_filter(query, scope);
      while (query.step()) {
        result.push_back(ledger_detail::make_row(query));
      }
    }
    transaction.commit();
    return result;
  }

  bool forget_completed(const std::string& work_key, const std::string& observed_token) override {
    return fenced_update(
        "DELETE FROM ledger WHERE work_key = ?1 AND claim_token = ?2 AND completed_at IS NOT NULL",
        work_key, observed_token);
  }

  int64_t archive(const ArchiveRequest& request) override {
    std::lock_guard<std::mutex> lock(m_mutex);
    sqlite::Transaction transaction(m_db);
    double cutoff = 0;
    {
      Query query(m_db, "SELECT " IDEM_SQLITE_NOW " - ?1");
      query.bind(1,
                 static_cast<double>(request.older_than.value_or(std::chrono::seconds(0)).count()));
      query.step();
      cutoff = query.real(0);
      query.run();
    }
    std::string where = "completed_at IS NOT NULL AND completed_at <= ?1";
    if (request.older_than) {
      where = "completed_at IS NOT NULL AND completed_at < ?1";
    }
    if (request.namespace_name) {
      where += " AND namespace = ?2";
    }
    if (request.superseded_only) {
      where += " AND superseded_at IS NOT NULL";
    }
    auto bind = [&](Query& query) {
      query.bind(1, cutoff);
      if (request.namespace_name) {
        query.bind(2, *request.namespace_name);
      }
    };
    {
      Query insert(m_db, std::string("INSERT INTO ledger_history (") + k_history_columns +
                             ", archived_at) SELECT " + k_history_columns +
                             ", " IDEM_SQLITE_NOW " FROM ledger WHERE " + where);
      bind(insert);
      insert.run();
    }
    Query remove(m_db, "DELETE FROM ledger WHERE " + where);
    bind(remove);
    remove.run();
    const int64_t moved = m_db.changes();
    transaction.commit();
    return moved;
  }

  int64_t drop_history(std::chrono::seconds older_than,
                       const std::optional<std::string>& namespace_name) override {
    std::string sql = "DELETE FROM ledger_history WHERE completed_at < " IDEM_SQLITE_NOW " - ?1";
    if (namespace_name) {
      sql += " AND namespace = ?2";
    }
    std::lock_guard<std::mutex> lock(m_mutex);
    Query query(m_db, sql);
    query.bind(1, static_cast<double>(older_than.count()));
    if (namespace_name) {
      query.bind(2, *namespace_name);
    }
    query.run();
    return m_db.changes();
  }

  double now() override {
    std::lock_guard<std::mutex> lock(m_mutex);
    Query query(m_db, "SELECT " IDEM_SQLITE_NOW);
    query.step();
    const double value = query.real(0);
    query.run();
    return value;
  }

  std::optional<std::string> digest_get(const std::string& path, const FileIdentity& identity) {
    std::lock_guard<std::mutex> lock(m_mutex);
    Query query(m_db, k_digest_get_sql);
    bind_identity(query.bind(1, path), identity);
    if (!query.step()) {
      return std::nullopt;
    }
    std::string digest = query.text(0);
    query.run();
    return digest;
  }

  void digest_put(const std::string& path, const FileIdentity& identity,
                  const std::string& digest) {
    std::lock_guard<std::mutex> lock(m_mutex);
    Query query(m_db, k_digest_put_sql);
    bind_identity(query.bind(1, path), identity);
    query.bind(7, digest).run();
  }

 private:
  static void bind_identity(Query& query, const FileIdentity& identity) {
    query.bind(2, static_cast<int64_t>(identity.device))
        .bind(3, static_cast<int64_t>(identity.inode))
        .bind(4, identity.size)
        .bind(5, identity.mtime_ns)
        .bind(6, identity.ctime_ns);
  }

  bool holds_tables() {
    Query query(m_db, "SELECT 1 FROM sqlite_master WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\'");
    return query.step();
  }

  std::vector<int> applied_versions() { return idem::applied_versions(m_db); }

  int schema_version_locked() {
    const std::vector<int> versions = applied_versions();
    return versions.empty() ? 0 : versions.back();
  }

  bool pending_migrations() {
    std::lock_guard<std::mutex> lock(m_mutex);
    const std::vector<int> applied = applied_versions();
    for (const Migration& migration : migrations("sqlite")) {
      if (!migration.requires_extension &&
          std::find(applied.begin(), applied.end(), migration.version) == applied.end()) {
        return true;
      }
    }
    return false;
  }

  // The WHERE clause's shape follows the filter (so the partial indexes serve expired_only and
  // in_flight_or_retried); every value is a parameter, at fixed positions ?1..?6 (bind_filter).
  static std::string filter_conditions(const Ledger::RowFilter& filter) {
    std::string sql = "1 = 1";
    // A page walks the rows in key order (the primary key, or the reap index). Without
    // statistics SQLite would rather take the namespace index and sort every row of the
    // namespace for each page (quadratic over a paged read); the unary + keeps namespace and
    // layer as plain filters.
    const bool key_order = filter.limit || filter.after_work_key || filter.in_flight_or_retried;
    const std::string no_index = key_order ? "+" : "";
    if (filter.namespace_name) {
      sql += " AND " + no_index + "namespace = ?1";
    }
    if (filter.layer) {
      sql += " AND " + no_index + "layer = ?2";
    }
    if (filter.output_uri) {
      sql += " AND output_uri = ?3";
    }
    if (filter.work_key) {
      sql += " AND work_key = ?4";
    }
    if (filter.work_key_prefix) {
      sql += " AND substr(work_key, 1, length(?5)) = ?5";
    }
    if (filter.state == RowState::k_completed) {
      sql += " AND completed_at IS NOT NULL";
    }
    if (filter.state == RowState::k_in_flight || filter.expired_only) {
      sql += " AND completed_at IS NULL";
    }
    if (filter.expired_only) {
      sql += " AND lease_expires_at <= " IDEM_SQLITE_NOW;
    }
    if (filter.in_flight_or_retried) {
      // The predicate of ledger_in_flight_or_retried_idx (0002_reap_index.sql), spelled the
      // same: SQLite uses a partial index only for a query term that matches it.
      sql += " AND (completed_at IS NULL OR attempt > 1)";
    }
    if (filter.after_work_key) {
      sql += " AND work_key > ?6";
    }
    return sql;
  }

  static void bind_filter(Query& query, const Ledger::RowFilter& filter) {
    if (filter.namespace_name) {
      query.bind(1, *filter.namespace_name);
    }
    if (filter.layer) {
      query.bind(2, *filter.layer);
    }
    if (filter.output_uri) {
      query.bind(3, *filter.output_uri);
    }
    if (filter.work_key) {
      query.bind(4, *filter.work_key);
    }
    if (filter.work_key_prefix) {
      query.bind(5, *filter.work_key_prefix);
    }
    if (filter.after_work_key) {
      query.bind(6, *filter.after_work_key);
    }
  }

  std::optional<LedgerRow> lookup_locked(const std::string& work_key) {
    static const std::string sql =
        std::string("SELECT ") + k_row_columns + " FROM ledger WHERE work_key = ?1";
    Query query(m_db, sql);
    query.bind(1, work_key);
    if (!query.step()) {
      return std::nullopt;
    }
    LedgerRow row = ledger_detail::make_row(query);
    query.run();
    return row;
  }

  bool fenced_update(const char* sql, const std::string& work_key, const std::string& token) {
    std::lock_guard<std::mutex> lock(m_mutex);
    Query query(m_db, sql);
    query.bind(1, work_key).bind(2, token).run();
    return m_db.changes() == 1;
  }

  std::string m_path;
  std::mutex m_mutex;
  sqlite::Database m_db;
  SqliteDigestCache m_digest_cache;
};

std::optional<std::string> SqliteDigestCache::get(const std::string& path,
                                                  const FileIdentity& identity) {
  return m_ledger.digest_get(path, identity);
}

void SqliteDigestCache::put(const std::string& path, const FileIdentity& identity,
                            const std::string& digest) {
  m_ledger.digest_put(path, identity, digest);
}

}  // namespace

namespace ledger_detail {

std::unique_ptr<Ledger> open_sqlite_ledger(const std::string& path, bool read_only) {
  return std::make_unique<SqliteLedger>(path, read_only);
}

}  // namespace ledger_detail

}  // namespace idem
