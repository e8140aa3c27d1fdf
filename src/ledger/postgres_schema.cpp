// SPDX-License-Identifier: MIT
// The PostgreSQL ledger's schema: its state in one query (applied versions, installed extensions,
// statements a pooler kept prepared), migrations under an advisory lock, and the claim statements,
// whose text follows the schema's shape (with PostGIS, the footprint too).
#include <cpl_conv.h>
#include <cpl_error.h>
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

// Start connecting, and asking the schema query once connected, without waiting for the server
// (postgres_preopen.cpp); the constructor takes the connection and the answer.
void PostgresLedger::preopen(const std::string& dsn) {
  PostgresOpening opening;
  opening.skip_gss = skip_gss_encryption(dsn);
  opening.connect_timeout = connect_timeout_of(dsn);
  opening.query = schema_state_sql(true);
  opening.query_params = {required_extensions()};
  start_postgres_preopen(dsn, std::move(opening));
}

MigrationReport PostgresLedger::migrate() {
  std::lock_guard<std::mutex> lock(m_mutex);
  ensure_connected();
  return migrate_locked();
}

int PostgresLedger::schema_version() {
  std::lock_guard<std::mutex> lock(m_mutex);
  ensure_connected();
  const SchemaState state = read_schema_state(false);
  return state.versions.empty() ? 0 : state.versions.back();
}

std::string PostgresLedger::schema_state_sql(bool initialised) {
  return std::string("SELECT ") + (initialised ? k_schema_versions_sql : "NULL::text") +
         k_schema_state_sql_rest;
}

const std::string& PostgresLedger::required_extensions() {
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
// one (migrations, and a read-only ledger's), where an error would abort the transaction, the
// table is looked up first.
SchemaState PostgresLedger::read_schema_state(bool in_transaction) {
  bool initialised = true;
  if (in_transaction || m_read_only) {  // a read-only ledger reads in its transaction
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
    if (code != nullptr && std::strcmp(code, k_insufficient_privilege) == 0) {
      refuse_unreadable_schema(
          checked(PQexec(m_connection.get(), k_schema_owner_sql), "reading the schema's owner"));
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
  if (!cells.is_null(3)) {
    state.owner = PQgetvalue(result.get(), 0, 3);
  }
  state.owned_by_this_role =
      !cells.is_null(4) && std::string(PQgetvalue(result.get(), 0, 4)) == "t";
  if (!cells.is_null(5)) {
    state.trust_problems = PQgetvalue(result.get(), 0, 5);
  }
  if (!cells.is_null(2)) {
    const std::vector<std::string> names = split_commas(PQgetvalue(result.get(), 0, 2));
    for (const std::string& name : names) {
      m_statement_uses[name] = 2;
    }
    m_statements_found_prepared += static_cast<int64_t>(names.size());
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
void PostgresLedger::forget_lost_footprint(SchemaState& state) {
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
std::vector<Migration> PostgresLedger::applicable_migrations(const SchemaState& state,
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

// The schema query was refused (no USAGE on schema idem): when another role owns that schema,
// says so, as init's refusal does; otherwise the caller reports the server's refusal.
void PostgresLedger::refuse_unreadable_schema(const PgResult& owner) const {
  if (PQntuples(owner.get()) == 1 && !PQgetisnull(owner.get(), 0, 0) &&
      std::string(PQgetvalue(owner.get(), 0, 1)) != "t") {
    throw Error(ErrorKind::k_ledger,
                "the PostgreSQL ledger " + m_redacted + ": schema idem is owned by role " +
                    PQgetvalue(owner.get(), 0, 0) +
                    ", which does not let this connection's role use it. If that role is the "
                    "ledger's owner, have it run worker_role.sql and connect as a member of "
                    "idem_worker; if not, drop that schema (DROP SCHEMA idem CASCADE, after "
                    "looking at what it holds) and run `gdal-idem init` as the intended owner "
                    "(docs/ledger.md)");
  }
}

// Refuses a ledger whose objects break the ownership rule (docs/ledger.md, "Who owns the
// ledger"), naming what and the fix.
void PostgresLedger::check_trust(const SchemaState& state) const {
  if (state.trust_problems) {
    throw Error(ErrorKind::k_ledger,
                "the PostgreSQL ledger " + m_redacted +
                    " is refused: every object of schema idem must belong to the role that ran "
                    "`gdal-idem init` (the schema's owner, " +
                    state.owner.value_or("?") +
                    "), and a superuser works only on a ledger it owns, but " +
                    *state.trust_problems +
                    ". An object another role owns runs that role's code with the rights of "
                    "whoever uses the ledger. Connect as the owner (or add options='-c "
                    "role=OWNER' to the DSN), or have the owner inspect and drop what it did not "
                    "create (docs/ledger.md)");
  }
}

MigrationReport PostgresLedger::migrate_locked() {
  MigrationReport report;
  {
    Transaction transaction(*this, "migration");
    exec_params("SELECT pg_advisory_xact_lock($1)", {std::string(k_migration_lock)}, "migration");
    SchemaState state = read_schema_state(true);
    if (state.owner && !state.owned_by_this_role) {
      // The owner of a schema may replace every function in it: DDL run inside another role's
      // schema, and the function prune later calls, would be that role's to rewrite.
      throw Error(ErrorKind::k_ledger,
                  "the PostgreSQL ledger " + m_redacted + ": schema idem is owned by role " +
                      *state.owner +
                      ", not by this connection's role, so `gdal-idem init` will not build or "
                      "migrate the ledger inside it (that role could replace the functions "
                      "`gdal-idem prune` runs). Run init as " +
                      *state.owner +
                      " if it is the ledger's owner; if not, drop that schema (DROP SCHEMA idem "
                      "CASCADE, after looking at what it holds) and revoke CREATE on the "
                      "database from roles that should not create schemas (docs/ledger.md)");
    }
    if (!state.owner) {
      // Not IF NOT EXISTS: a schema another role made since the look above is an error here,
      // never one this transaction builds in.
      exec_params("CREATE SCHEMA idem", {}, "migration");
    }
    check_trust(state);
    forget_lost_footprint(state);
    for (const Migration& migration : applicable_migrations(state, &report)) {
      checked(PQexec(m_connection.get(), migration.sql.c_str()), "migration " + migration.name);
      exec_params("INSERT INTO idem.schema_version (version, name) VALUES ($1, $2)",
                  {std::to_string(migration.version), migration.name}, "migration");
      report.applied.push_back(migration.name);
    }
    const SchemaState built = read_schema_state(true);
    if (!built.owned_by_this_role) {
      throw Error(ErrorKind::k_ledger, "the PostgreSQL ledger " + m_redacted +
                                           ": schema idem changed owner during the migration");
    }
    check_trust(built);
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

// After a statement failed on a schema with footprints: whether the column was dropped
// meanwhile (DROP EXTENSION postgis CASCADE). If so, work goes on without footprints on this
// connection, and `gdal-idem init` is what brings the column back.
bool PostgresLedger::footprint_column_lost() {
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
void PostgresLedger::open_schema() {
  const SchemaState state = read_schema_state(false);
  check_trust(state);
  check_schema_version(m_redacted, "postgresql", state.versions, m_read_only);
  if (m_read_only || applicable_migrations(state, nullptr).empty()) {
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
    if (existing.versions.empty() && existing.owner && !existing.owned_by_this_role) {
      throw;  // init's refusal of another role's schema says what to do
    }
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
void PostgresLedger::use_schema(const SchemaState& state) {
  m_owned_by_this_role = state.owned_by_this_role;
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
           columns + ") SELECT " + values + " WHERE NOT EXISTS (SELECT FROM current)" + condition +
           on_conflict + ", true) SELECT * FROM claimed UNION ALL SELECT * FROM current";
  };
  forget_prepared_if_changed("idem_claim", m_claim_sql, claim_sql);
  forget_prepared_if_changed("idem_claim_unless_completed", m_claim_unless_completed_sql,
                             claim_unless_completed(""));
  forget_prepared_if_changed(
      "idem_claim_unless_deferred", m_claim_unless_completed_deferred_sql,
      claim_unless_completed(" AND set_config('synchronous_commit', 'off', true) IS NOT NULL"));
}

const char* PostgresLedger::claim_unless_completed_name(bool deferred) const {
  return deferred ? "idem_claim_unless_deferred" : "idem_claim_unless_completed";
}

const std::string& PostgresLedger::claim_unless_completed_sql(bool deferred) const {
  return deferred ? m_claim_unless_completed_deferred_sql : m_claim_unless_completed_sql;
}

// A statement's text changed with the schema's shape: the new text has a name of its own
// (statement_name), and the old one, if prepared on this connection, is deallocated.
void PostgresLedger::forget_prepared_if_changed(const char* base_name, std::string& current,
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

}  // namespace idem::ledger_detail
