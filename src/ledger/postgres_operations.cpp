// SPDX-License-Identifier: MIT
// The PostgreSQL ledger: what operators call (gdal-idem status, reap, verify, export, forget,
// prune): rows and counts over many works, history, forgetting, retention.
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

int64_t PostgresLedger::forget_key(const std::string& work_key) {
  std::lock_guard<std::mutex> lock(m_mutex);
  ensure_connected();
  return affected(exec_statement("idem_forget_key", k_forget_key_sql, {work_key}, "forget_key"));
}

std::vector<LedgerRow> PostgresLedger::rows(const RowFilter& filter) {
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
    result.push_back(make_row(ResultRow(rows.get(), i)));
  }
  return result;
}

LedgerCounts PostgresLedger::counts(const RowFilter& filter) {
  RowFilter scope;
  scope.namespace_name = filter.namespace_name;
  scope.layer = filter.layer;
  Params params;
  const std::string sql =
      "SELECT count(*) FILTER (WHERE completed_at IS NOT NULL AND superseded_at IS NULL), "
      "count(*) FILTER (WHERE superseded_at IS NOT NULL), "
      "count(*) FILTER (WHERE completed_at IS NULL AND released_at IS NULL "
      "AND lease_expires_at > now()), "
      "count(*) FILTER (WHERE completed_at IS NULL AND released_at IS NULL "
      "AND lease_expires_at <= now()), "
      "CAST(extract(epoch FROM min(claimed_at) FILTER (WHERE completed_at IS NULL AND "
      "released_at IS NULL)) AS float8), "
      "count(*) FILTER (WHERE completed_at >= now() - interval '1 hour'), "
      "count(*) FILTER (WHERE completed_at IS NULL AND released_at IS NOT NULL) "
      "FROM idem.ledger WHERE " +
      filter_conditions(scope, params);
  std::lock_guard<std::mutex> lock(m_mutex);
  ensure_connected();
  PgResult result = exec_params(sql, params, "counts");
  return make_counts(ResultRow(result.get(), 0));
}

std::vector<LedgerRow> PostgresLedger::history(const RowFilter& filter) {
  std::vector<LedgerRow> result;
  const auto scope = history_scope(filter);
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
    result.push_back(make_row(ResultRow(rows.get(), i)));
  }
  return result;
}

std::vector<LedgerRow> PostgresLedger::forget_rows(const RowFilter& filter) {
  const RowFilter scope = forget_scope(filter);
  Params params;
  const std::string sql = std::string("DELETE FROM idem.ledger WHERE ") +
                          filter_conditions(scope, params) + " RETURNING " + k_row_columns;
  std::lock_guard<std::mutex> lock(m_mutex);
  ensure_connected();
  PgResult rows = exec_params(sql, params, "forget");
  std::vector<LedgerRow> result;
  result.reserve(static_cast<size_t>(PQntuples(rows.get())));
  for (int i = 0; i < PQntuples(rows.get()); ++i) {
    result.push_back(make_row(ResultRow(rows.get(), i)));
  }
  return result;
}

bool PostgresLedger::forget_completed(const std::string& work_key,
                                      const std::string& observed_token) {
  std::lock_guard<std::mutex> lock(m_mutex);
  ensure_connected();
  return affected(exec_params("DELETE FROM idem.ledger WHERE work_key = $1 AND claim_token = $2 "
                              "AND completed_at IS NOT NULL",
                              {work_key, observed_token}, "forget_completed")) == 1;
}

int64_t PostgresLedger::archive(const ArchiveRequest& request) {
  std::lock_guard<std::mutex> lock(m_mutex);
  ensure_connected();
  return with_footprint_fallback([&] { return archive_locked(request); });
}

int64_t PostgresLedger::archive_locked(const ArchiveRequest& request) {
  if (!m_owned_by_this_role) {
    // The move calls the ledger's function, with this role's rights: retention stays with the
    // owner (docs/ledger.md, "Who owns the ledger").
    throw Error(ErrorKind::k_ledger,
                "the PostgreSQL ledger " + m_redacted +
                    ": prune moves rows with the ledger's function "
                    "idem.ensure_history_partitions(), so it runs as the role that owns schema "
                    "idem (that ran `gdal-idem init`), not as this one");
  }
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
  exec_params("SELECT idem.ensure_history_partitions(now() + interval '1 second')", {}, "archive");
  PgResult moved =
      exec_params("WITH moved AS (DELETE FROM idem.ledger WHERE " + where + " RETURNING " +
                      columns + ") INSERT INTO idem.ledger_history (" + columns +
                      ", archived_at) SELECT " + columns + ", now() FROM moved",
                  params, "archive");
  transaction.commit();
  return affected(moved);
}

int64_t PostgresLedger::drop_history(std::chrono::seconds older_than,
                                     const std::optional<std::string>& namespace_name) {
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

double PostgresLedger::now() {
  std::lock_guard<std::mutex> lock(m_mutex);
  ensure_connected();
  PgResult result = exec_statement("idem_now", k_now_sql, {}, "now");
  return std::strtod(PQgetvalue(result.get(), 0, 0), nullptr);
}

// The WHERE clause's shape follows the filter (so the partial indexes serve expired_only and
// in_flight_or_retried); every value is a parameter appended to `params`.
std::string PostgresLedger::filter_conditions(const Ledger::RowFilter& filter, Params& params) {
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

}  // namespace idem::ledger_detail
