// SPDX-License-Identifier: MIT
// The PostgreSQL ledger's SQL text, and the small helpers its statements share: parameters,
// result cells, footprints and arrays as the statements bind them. Internal to src/ledger.
#pragma once

#include <libpq-fe.h>
#include <strings.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/digest_cache.hpp"
#include "ledger/ledger_internal.hpp"
#include "pg/pg_handles.hpp"

namespace idem::ledger_detail {

// pg_advisory_xact_lock key serialising concurrent migrations (any constant unique to us).
inline constexpr const char* k_migration_lock = "7306435217950412";

inline constexpr const char* k_row_columns =
    "work_key, namespace, layer, tile_z, tile_x, tile_y, attempt, claim_token, worker_host, "
    "worker_pid, output_uri, output_size, output_mtime_ns, output_sha256, output_etag, "
    "output_members, feature_count, work_json, CAST(extract(epoch FROM claimed_at) AS float8), "
    "CAST(extract(epoch FROM lease_expires_at) AS float8), "
    "CAST(extract(epoch FROM completed_at) AS float8), "
    "CAST(extract(epoch FROM superseded_at) AS float8), "
    "CAST(extract(epoch FROM released_at) AS float8), "
    "CAST(extract(epoch FROM lease_expires_at - now()) AS float8)";

// After k_row_columns, the flag that claim_unless_completed's statement adds.
inline constexpr int k_claimed_flag_column = k_col_lease_left + 1;

inline constexpr const char* k_history_columns =
    "work_key, namespace, layer, tile_z, tile_x, tile_y, claimed_at, lease_expires_at, "
    "completed_at, superseded_at, released_at, attempt, claim_token, worker_host, worker_pid, "
    "output_uri, output_size, output_mtime_ns, output_sha256, output_etag, feature_count, "
    "work_json, output_members";

// The rows a claim token holds: its claim, neither completed nor released (the fence of every
// statement that writes as the claim's holder).
#define IDEM_HELD_BY_TOKEN \
  "WHERE work_key = $1 AND claim_token = $2 AND completed_at IS NULL AND released_at IS NULL"

inline constexpr const char* k_heartbeat_sql =
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
inline constexpr const char* k_complete_sql = IDEM_COMPLETE_SQL;
inline constexpr const char* k_complete_async_sql =
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
inline constexpr const char* k_confirm_ahead_sql =
    "BEGIN;SELECT pg_logical_emit_message(true, 'gdal-idem', '');COMMIT;";
inline constexpr int k_confirm_ahead_results = 3;

// The confirmation when that answer is missing: the claim's row rewritten as it is, in a
// transaction of the session's durability. It finds the row only if the ledger still has the
// claim (a server that crashed before flushing it has not).
inline constexpr const char* k_confirm_claim_sql =
    "UPDATE idem.ledger SET lease_expires_at = lease_expires_at " IDEM_HELD_BY_TOKEN;

inline constexpr const char* k_completed_by_sql =
    "SELECT 1 FROM idem.ledger WHERE work_key = $1 AND claim_token = $2 "
    "AND completed_at IS NOT NULL";

inline constexpr const char* k_release_sql =
    "UPDATE idem.ledger SET lease_expires_at = GREATEST(now(), claimed_at), "
    "released_at = GREATEST(now(), claimed_at) " IDEM_HELD_BY_TOKEN;
#undef IDEM_HELD_BY_TOKEN

inline constexpr const char* k_invalidate_sql =
    "UPDATE idem.ledger SET completed_at = NULL, superseded_at = NULL, "
    "released_at = GREATEST(now(), claimed_at), lease_expires_at = GREATEST(now(), claimed_at), "
    "output_size = NULL, output_mtime_ns = NULL, output_sha256 = NULL, output_etag = NULL, "
    "output_members = NULL, feature_count = NULL WHERE work_key = $1 AND claim_token = $2 AND "
    "completed_at IS NOT NULL";

inline constexpr const char* k_replace_etag_sql =
    "UPDATE idem.ledger SET output_etag = $4 WHERE work_key = $1 AND claim_token = $2 "
    "AND completed_at IS NOT NULL AND output_etag = $3";

inline constexpr const char* k_forget_key_sql = "DELETE FROM idem.ledger WHERE work_key = $1";
inline constexpr const char* k_now_sql = "SELECT extract(epoch FROM now())::float8";

inline constexpr const char* k_digest_get_sql =
    "SELECT digest FROM idem.source_digest WHERE path = $1 AND device = $2 AND inode = $3 "
    "AND size = $4 AND mtime_ns = $5 AND ctime_ns = $6";

// The identities are compared by the caller (path is the key: one row per path at most).
inline constexpr const char* k_digest_get_many_sql =
    "SELECT path, device, inode, size, mtime_ns, ctime_ns, digest FROM idem.source_digest "
    "WHERE path = ANY ($1::text[])";

inline constexpr const char* k_digest_put_sql =
    "INSERT INTO idem.source_digest AS d (path, device, inode, size, mtime_ns, ctime_ns, digest) "
    "VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT ON CONSTRAINT source_digest_pk DO UPDATE SET "
    "device = EXCLUDED.device, inode = EXCLUDED.inode, size = EXCLUDED.size, "
    "mtime_ns = EXCLUDED.mtime_ns, ctime_ns = EXCLUDED.ctime_ns, digest = EXCLUDED.digest, "
    "recorded_at = now()";

// Everything open() needs to know, in one round trip: the applied versions (the query fails
// with undefined_table on an uninitialised database) and which of the extensions that
// conditional migrations require ($1, comma-separated) are installed. No catalog lookup of the
// footprint column: on a fresh connection that alone cost as much as the rest of the query.
inline constexpr const char* k_schema_versions_sql =
    "(SELECT string_agg(version::text, ',' ORDER BY version) FROM idem.schema_version)";
inline constexpr const char* k_schema_state_sql_rest =
    ", (SELECT string_agg(extname, ',') FROM pg_extension "
    "WHERE extname = ANY (string_to_array($1, ',')))"
    // The ledger's statements already prepared in this server session: an earlier client of a
    // pooler that keeps them (docs/operations.md) left them; their names carry a hash of their
    // text (statement_name), so a name found is the very statement.
    ", (SELECT string_agg(name, ',') FROM pg_prepared_statements WHERE name LIKE 'idem\\_%')"
    // Who owns the ledger (docs/ledger.md): the schema's owner, whether it is this connection's
    // role, and what breaks the rule that every object of the ledger is the schema owner's
    // (NULL when nothing), in the same round trip. A superuser that does not own the ledger
    // would run its owner's code (a replaced function, a trigger) with a superuser's rights.
    ", (SELECT pg_get_userbyid(nspowner) FROM pg_namespace WHERE nspname = 'idem')"
    ", (SELECT nspowner = (SELECT oid FROM pg_roles WHERE rolname = current_user) "
    "FROM pg_namespace WHERE nspname = 'idem')"
    ", (SELECT string_agg(problem, '; ' ORDER BY problem) FROM ("
    "SELECT format('%s idem.%s is owned by role %s', CASE WHEN c.relkind IN ('r', 'p') THEN "
    "'table' WHEN c.relkind IN ('i', 'I') THEN 'index' WHEN c.relkind = 'v' THEN 'view' WHEN "
    "c.relkind = 'S' THEN 'sequence' ELSE 'relation' END, quote_ident(c.relname), "
    "quote_ident(pg_get_userbyid(c.relowner))) AS problem FROM pg_class c JOIN pg_namespace n ON "
    "n.oid = c.relnamespace WHERE n.nspname = 'idem' AND c.relowner <> n.nspowner "
    "UNION ALL SELECT format('function %s is owned by role %s', p.oid::regprocedure, "
    "quote_ident(pg_get_userbyid(p.proowner))) FROM pg_proc p JOIN pg_namespace n ON "
    "n.oid = p.pronamespace WHERE n.nspname = 'idem' AND p.proowner <> n.nspowner "
    "UNION ALL SELECT format('type idem.%s is owned by role %s', quote_ident(t.typname), "
    "quote_ident(pg_get_userbyid(t.typowner))) FROM pg_type t JOIN pg_namespace n ON "
    "n.oid = t.typnamespace WHERE n.nspname = 'idem' AND t.typowner <> n.nspowner "
    "UNION ALL SELECT format('this connection''s role %s is a superuser and the ledger is owned "
    "by role %s', quote_ident(current_user), quote_ident(pg_get_userbyid(n.nspowner))) FROM "
    "pg_namespace n WHERE n.nspname = 'idem' AND n.nspowner <> (SELECT oid FROM pg_roles WHERE "
    "rolname = current_user) AND (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)"
    ") AS problems)";
// The owner of schema idem and whether it is this connection's role (one row; none without the
// schema).
inline constexpr const char* k_schema_owner_sql =
    "SELECT pg_get_userbyid(nspowner), nspowner = (SELECT oid FROM pg_roles WHERE rolname = "
    "current_user) FROM pg_namespace WHERE nspname = 'idem'";
// sql/postgres/0002_footprint.sql adds the footprint column (in the transaction that records
// its version): rows carry a footprint when this version is applied and PostGIS is still there
// (DROP EXTENSION postgis CASCADE drops the column but not the version's record).
inline constexpr int k_footprint_migration_version = 2;
// The migration whose column (output_members) every row statement names.
inline constexpr int k_output_members_version = 4;
inline constexpr const char* k_footprint_extension = "postgis";  // 0002's requires-extension
inline constexpr const char* k_footprint_column_exists_sql =
    "SELECT EXISTS (SELECT FROM pg_attribute WHERE attrelid = to_regclass('idem.ledger') "
    "AND attname = 'footprint' AND NOT attisdropped)";
inline constexpr const char* k_undefined_table = "42P01";
inline constexpr const char* k_invalid_schema_name = "3F000";
inline constexpr const char* k_insufficient_privilege = "42501";
inline constexpr const char* k_duplicate_prepared_statement = "42P05";

// What one schema query says (see k_schema_versions_sql).
struct SchemaState {
  std::vector<int> versions;                  // applied, ascending; empty when uninitialised
  std::set<std::string> extensions;           // installed, among those conditional migrations need
  std::optional<std::string> owner;           // the idem schema's owner; nullopt when there is none
  bool owned_by_this_role = false;            // the connection's role (current_user) is the owner
  std::optional<std::string> trust_problems;  // what breaks the ownership rule; nullopt: nothing
  bool has_footprint() const {
    return std::find(versions.begin(), versions.end(), k_footprint_migration_version) !=
               versions.end() &&
           extensions.count(k_footprint_extension) != 0;
  }
};

inline bool starts_with_word(const std::string& text, size_t at, const char* word) {
  const size_t length = std::strlen(word);
  return text.size() - at >= length && strncasecmp(text.c_str() + at, word, length) == 0;
}

// The claim's footprint as EWKT for the column geometry(MultiPolygon, 4326), bound as that
// column's type: PostGIS's geometry input parses it, so the statement calls no function and
// names no PostGIS schema. A POLYGON becomes the one-part MULTIPOLYGON that ST_Multi made of it;
// anything else goes as it is, for the server to accept or refuse.
inline std::optional<std::string> footprint_ewkt(const std::optional<std::string>& wkt) {
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

inline std::vector<std::string> split_commas(const char* text) {
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

inline std::optional<std::string> text_param(const std::optional<int64_t>& value) {
  return value ? std::optional<std::string>(std::to_string(*value)) : std::nullopt;
}

// The parameters of the completion statements ($1 to $8, IDEM_COMPLETE_SQL's order).
inline Params completion_params(const std::string& work_key, const std::string& claim_token,
                                const OutputFingerprint& fingerprint,
                                std::optional<int64_t> feature_count) {
  return {work_key,
          claim_token,
          std::to_string(fingerprint.size),
          std::to_string(fingerprint.mtime_ns),
          fingerprint.sha256,
          fingerprint.etag,
          text_param(feature_count),
          fingerprint.members};
}

inline std::string identity_param(uint64_t value) {
  return std::to_string(static_cast<int64_t>(value));  // unsigned, stored bit for bit
}

// `first`, then a file identity as the digest statements take it ($2 to $6).
inline Params with_identity(std::string first, const FileIdentity& identity) {
  return {std::move(first),
          identity_param(identity.device),
          identity_param(identity.inode),
          std::to_string(identity.size),
          std::to_string(identity.mtime_ns),
          std::to_string(identity.ctime_ns)};
}

// A text[] literal: every element quoted, with '"' and '\\' escaped.
inline std::string text_array_literal(const std::vector<std::string>& items) {
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

}  // namespace idem::ledger_detail
