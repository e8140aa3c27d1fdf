// SPDX-License-Identifier: MIT
// What the ledger backends share and do not publish: factories, the embedded migrations parser,
// password scrubbing for messages.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ledger/ledger.hpp"
#include "pg/dsn_secrets.hpp"
#include "pg/pg_handles.hpp"

namespace idem::ledger_detail {

// A backend that can complete inside a transaction the caller has open on its own connection
// (PostgreSQL); complete_in_transaction() in caller_transaction.hpp reaches it.
class CallerTransactionCompletion {
 public:
  virtual ~CallerTransactionCompletion() = default;
  virtual bool complete_in_transaction(PGconn* connection, const std::string& work_key,
                                       const std::string& claim_token,
                                       const OutputFingerprint& fingerprint,
                                       std::optional<int64_t> feature_count) = 0;
};

std::unique_ptr<Ledger> open_sqlite_ledger(const std::string& path, bool read_only = false);
std::unique_ptr<Ledger> open_postgres_ledger(const std::string& dsn, bool read_only = false);

// The one schema check of every open (Ledger::open_read_only): throws Error(k_ledger) when the
// ledger `label` of `backend` ("sqlite", "postgresql"), whose applied migrations are `applied`, is
// newer than this release knows, or, opened `read_only`, is not a ledger at all or lacks a
// migration this release needs (conditional ones aside).
void check_schema_version(const std::string& label, const std::string& backend,
                          const std::vector<int>& applied, bool read_only);
void preopen_postgres_ledger(const std::string& dsn);

// Whether to connect with gssencmode=disable: the DSN (nor PGGSSENCMODE, nor a service) does not
// choose, and every host is on this machine (loopback or a Unix socket), where encryption
// protects nothing. libpq's default (prefer) looks for Kerberos credentials on every connection
// first, a good part of a tile's whole ledger time through a local PgBouncer
// (bench/RESULTS.md, "PostgreSQL connection costs" in docs/operations.md).
bool skip_gss_encryption(const std::string& dsn);
// gdal-idem's connect_timeout (the DSN may set another).
constexpr int k_default_connect_timeout_seconds = 10;
// How long libpq waits for a connection to `dsn`, as connect_parameters() set it up.
std::chrono::seconds connect_timeout_of(const std::string& dsn);

// libpq's keyword/value arrays (null-terminated) for a connection to `dsn`: gdal-idem's defaults
// (application_name, connect_timeout, gssencmode=disable when `skip_gss`), which the DSN
// overrides. The values point into `dsn`, which must outlive them.
struct ConnectParameters {
  std::vector<const char*> keywords;
  std::vector<const char*> values;
};
ConnectParameters connect_parameters(const std::string& dsn, bool skip_gss);

// What a PostgreSQL ledger asks first on a new connection (its schema query), so that a
// connection opened ahead of need can ask it too.
struct PostgresOpening {
  bool skip_gss = false;  // skip_gss_encryption(dsn), worked out by the caller
  std::chrono::seconds connect_timeout{k_default_connect_timeout_seconds};
  std::string query;
  std::vector<std::string> query_params;
};
// A connection opened ahead (OK or failed: its error message is the one to report) and, when it
// connected, the answer to the opening query (nullptr when it could not be asked). No
// connection and `timed_out`: not made within the connect timeout (reported as libpq would).
struct Preopened {
  pg::Connection connection;
  pg::Result first_answer;
  bool timed_out = false;
};
// Starts connecting to `dsn` (libpq's non-blocking connection) and goes as far as it can without
// waiting; then `opening.query` is sent as soon as the connection is made. Nothing when an
// attempt for `dsn` is already waiting to be taken (postgres_preopen.cpp).
void start_postgres_preopen(const std::string& dsn, PostgresOpening opening);
// Moves every attempt on as far as it goes without waiting.
void advance_postgres_preopens();
// The attempt started for `dsn` in this process, finished now (waiting for what is left of it,
// up to the connect timeout from its start); nullopt when none was started, or the connection
// was made but did not answer the query in time (the caller connects itself).
std::optional<Preopened> take_postgres_preopened(const std::string& dsn);

// The filter a history() query runs with (state dropped: history rows are completed ones), or
// nullopt when the filter cannot match a history row (absent, in flight, expired claims).
std::optional<Ledger::RowFilter> history_scope(const Ledger::RowFilter& filter);
// The filter forget_rows() deletes with (no limit); throws k_usage when it names no namespace,
// layer, output or key, so a bare forget never deletes the whole ledger.
Ledger::RowFilter forget_scope(const Ledger::RowFilter& filter);

// The columns every row query selects, in this order (each backend spells the times its way).
enum RowColumn {
  k_col_work_key,
  k_col_namespace,
  k_col_layer,
  k_col_tile_z,
  k_col_tile_x,
  k_col_tile_y,
  k_col_attempt,
  k_col_claim_token,
  k_col_worker_host,
  k_col_worker_pid,
  k_col_output_uri,
  k_col_output_size,
  k_col_output_mtime_ns,
  k_col_output_sha256,
  k_col_output_etag,
  k_col_output_members,
  k_col_feature_count,
  k_col_work_json,
  k_col_claimed_at,
  k_col_lease_expires_at,
  k_col_completed_at,
  k_col_superseded_at,
  k_col_released_at,
  k_col_lease_left,
  k_row_column_count
};

// Build a LedgerRow from a result row. `Cells` offers is_null(i), text(i), integer(i), real(i).
template <class Cells>
LedgerRow make_row(const Cells& cells) {
  auto opt_text = [&](int i) -> std::optional<std::string> {
    return cells.is_null(i) ? std::nullopt : std::optional<std::string>(cells.text(i));
  };
  auto opt_int = [&](int i) -> std::optional<int64_t> {
    return cells.is_null(i) ? std::nullopt : std::optional<int64_t>(cells.integer(i));
  };
  auto opt_real = [&](int i) -> std::optional<double> {
    return cells.is_null(i) ? std::nullopt : std::optional<double>(cells.real(i));
  };
  LedgerRow row;
  row.work_key = cells.text(k_col_work_key);
  row.namespace_name = cells.text(k_col_namespace);
  row.layer = opt_text(k_col_layer);
  if (!cells.is_null(k_col_tile_z)) {
    row.tile = TileIndex{static_cast<int>(cells.integer(k_col_tile_z)),
                         static_cast<int>(cells.integer(k_col_tile_x)),
                         static_cast<int>(cells.integer(k_col_tile_y))};
  }
  row.attempt = cells.integer(k_col_attempt);
  row.claim_token = cells.text(k_col_claim_token);
  row.worker_host = cells.text(k_col_worker_host);
  row.worker_pid = cells.integer(k_col_worker_pid);
  row.output_uri = cells.text(k_col_output_uri);
  if (!cells.is_null(k_col_output_size)) {
    OutputFingerprint fingerprint;
    fingerprint.size = cells.integer(k_col_output_size);
    fingerprint.mtime_ns = opt_int(k_col_output_mtime_ns).value_or(0);
    fingerprint.sha256 = opt_text(k_col_output_sha256);
    fingerprint.etag = opt_text(k_col_output_etag);
    fingerprint.members = opt_text(k_col_output_members);
    row.fingerprint = fingerprint;
  }
  row.feature_count = opt_int(k_col_feature_count);
  row.work_json = cells.text(k_col_work_json);
  row.claimed_at = opt_real(k_col_claimed_at);
  row.lease_expires_at = opt_real(k_col_lease_expires_at);
  row.completed_at = opt_real(k_col_completed_at);
  row.superseded_at = opt_real(k_col_superseded_at);
  row.released_at = opt_real(k_col_released_at);
  if (row.completed_at) {
    row.state = RowState::k_completed;
  } else {
    row.state = RowState::k_in_flight;
    row.lease_left_seconds = opt_real(k_col_lease_left);
  }
  return row;
}

// Build LedgerCounts from the counts query's one row, whose columns are, in this order: completed,
// superseded, in flight, stale, oldest claim (NULL when none), completed in the last hour,
// released.
template <class Cells>
LedgerCounts make_counts(const Cells& cells) {
  LedgerCounts counts;
  counts.completed = cells.integer(0);
  counts.superseded = cells.integer(1);
  counts.in_flight = cells.integer(2);
  counts.stale = cells.integer(3);
  if (!cells.is_null(4)) {
    counts.oldest_in_flight_claimed_at = cells.real(4);
  }
  counts.completed_last_hour = cells.integer(5);
  counts.released = cells.integer(6);
  return counts;
}

// What lookup() answers for a key without a row.
inline LedgerRow absent_row(const std::string& work_key) {
  LedgerRow absent;
  absent.work_key = work_key;
  absent.state = RowState::k_absent;
  return absent;
}

// How many times claim() re-runs its statement when the row it lost to changed state before it
// could be read (released, completed then superseded...): a bounded loop, never a spin.
constexpr int k_claim_rounds = 4;

// Classify a claim that did not get the row from the row as it stands; nullopt: claim again.
inline std::optional<ClaimOutcome> classify_lost_claim(const LedgerRow& row) {
  if (row.state == RowState::k_completed && !row.superseded_at) {
    return ClaimOutcome::k_completed;
  }
  if (row.state == RowState::k_in_flight && row.lease_left_seconds && *row.lease_left_seconds > 0 &&
      !row.released_at) {
    return ClaimOutcome::k_busy;
  }
  return std::nullopt;
}

// A claim's answer made of the row as it stands: its attempt, and the token when claimed.
inline ClaimResult claim_result(ClaimOutcome outcome, LedgerRow row) {
  ClaimResult result;
  result.outcome = outcome;
  result.attempt = row.attempt;
  if (outcome == ClaimOutcome::k_claimed) {
    result.claim_token = row.claim_token;
  }
  result.row = std::move(row);
  return result;
}

// The claim rounds of both backends. `attempt(round)` runs the claim statement once: the answer
// when the statement returned a row (claimed, or completed for a statement that also reports
// completed work), nullopt when its conditions kept it from writing. `lookup()` then reads the
// row as it stands (nullopt when absent): a row that vanished in between (forgotten) is inserted
// again, one that still holds the work gives its outcome, one that changed state meanwhile
// (released, superseded) is claimed again. After k_claim_rounds: busy, with the row as it stands.
// A template, so each backend's statements are called directly (claim_bench measures this path).
template <class Attempt, class Lookup>
ClaimResult run_claim_rounds(Attempt&& attempt, Lookup&& lookup) {
  for (int round = 0; round < k_claim_rounds; ++round) {
    if (std::optional<ClaimResult> answered = attempt(round)) {
      return std::move(*answered);
    }
    std::optional<LedgerRow> row = lookup();
    if (!row) {
      continue;  // forgotten in between: insert again
    }
    if (auto outcome = classify_lost_claim(*row)) {
      return claim_result(*outcome, std::move(*row));
    }
  }
  return claim_result(ClaimOutcome::k_busy, lookup().value_or(LedgerRow{}));
}

}  // namespace idem::ledger_detail
