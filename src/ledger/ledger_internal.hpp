// What the ledger backends share and do not publish: factories, the embedded migrations parser,
// password scrubbing for messages.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "ledger/ledger.hpp"

namespace idem::ledger_detail {

std::unique_ptr<Ledger> open_sqlite_ledger(const std::string& path);
std::unique_ptr<Ledger> open_postgres_ledger(const std::string& dsn);

// The password given in a libpq DSN (URI or keyword string), "" when none or unparsable.
std::string dsn_password(const std::string& dsn);
// Whether to connect with gssencmode=disable: the DSN (nor PGGSSENCMODE, nor a service) does not
// choose, and every host is on this machine (loopback or a Unix socket), where encryption
// protects nothing. libpq's default (prefer) looks for Kerberos credentials on every connection
// first, ~0.8 ms, a tenth of a tile's whole ledger time through a local PgBouncer.
bool skip_gss_encryption(const std::string& dsn);
// `message` with every occurrence of `secret` masked (no-op for an empty secret).
std::string scrub_secret(std::string message, const std::string& secret);

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

// How many times claim() re-runs its statement when the row it lost to changed state before it
// could be read (released, completed then superseded...): a bounded loop, never a spin.
constexpr int k_claim_rounds = 4;

// Classify a claim that did not get the row from the row as it stands; nullopt: claim again.
inline std::optional<ClaimOutcome> classify_lost_claim(const LedgerRow& row) {
  if (row.state == RowState::k_completed && !row.superseded_at) {
    return ClaimOutcome::k_completed;
  }
  if (row.state == RowState::k_in_flight && row.lease_left_seconds &&
      *row.lease_left_seconds > 0 && !row.released_at) {
    return ClaimOutcome::k_busy;
  }
  return std::nullopt;
}

}  // namespace idem::ledger_detail
