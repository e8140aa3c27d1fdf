// SPDX-License-Identifier: MIT
// Feature loads: claim, load into a staging table of the target database, then in one
// transaction swap it in (replace) or replace the bundle's rows (append) and complete the ledger
// row (docs/loads.md, "How a load runs").
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "key/feature_key.hpp"

namespace idem {

struct FeatureLoadRequest {
  Ogr2ogrCommand command;
  FeatureLoadSettings settings;     // digest_cache is set from the ledger when null
  std::string ledger_dsn;           // Ledger::open() DSN ("" = default SQLite file)
  std::chrono::seconds lease{300};  // IDEM_STALE_SECONDS
  bool fail_when_busy = false;      // IDEM_ON_BUSY=FAIL
  bool show_progress = false;       // the command asked for -progress
};

enum class FeatureLoadOutcome { k_loaded, k_skipped };

struct FeatureLoadResult {
  FeatureLoadOutcome outcome = FeatureLoadOutcome::k_loaded;
  FeatureWork work;
  int64_t feature_count = 0;
  int64_t attempt = 0;
  // The completion committed in the target's swap transaction (the ledger is that database).
  bool completed_with_swap = false;
  bool waited = false;  // another worker held the load; this one waited for it
};

// Run the load (or skip it when completed). Throws idem::Error: k_usage (bad command), k_source
// (unreadable bundle, GDAL's load failed), k_io (the target refused a statement), k_ledger. On
// any failure the claim is released and the staging table dropped; the target is unchanged.
FeatureLoadResult run_feature_load(FeatureLoadRequest request);

// The staging table names of a key start with this (orphans of killed attempts are dropped by
// the next attempt): "idem_stg_" + the key's first 16 hex digits + "_".
std::string staging_table_prefix(const std::string& work_key);

}  // namespace idem
