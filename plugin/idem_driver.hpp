// The IDEM raster driver: CreateCopy only. Claims the work in the ledger before any pixel is
// computed, writes through the real driver (FORMAT=) into a temporary file, renames it into
// place, completes the ledger row, and skips work that is already done.
#pragma once

#include <functional>
#include <string>

namespace idem {

// Register the IDEM driver and install /vsiidem/ (idempotent).
void register_idem_driver();

// Dry runs (IDEM_DRY_RUN=YES) print "IDEM dry run: key=..." on stdout, or, when a listener is
// set (`gdal-idem key` sets one), report to it instead.
struct DryRunReport {
  std::string key;
  std::string canonical_json;
  std::string destination;
};
using DryRunListener = std::function<void(const DryRunReport&)>;
void set_dry_run_listener(DryRunListener listener);

}  // namespace idem
