// The IDEM raster driver: CreateCopy only. Claims the work in the ledger before any pixel is
// computed, writes through the real driver (FORMAT=) into a temporary file, renames it into
// place, completes the ledger row, and skips work that is already done.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "cpl_port.h"
#include "gdal_priv.h"

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

class DigestCache;
struct LedgerRow;
struct OutputFingerprint;

// The source-digest cache dry runs use: null (the default) gives each dry run a fresh in-memory
// cache. `gdal-idem pending` sets its ledger's persistent cache, so that a source shared by the
// commands of a batch is hashed once at most (not at all when the real runs hashed it already).
void set_dry_run_digest_cache(DigestCache* cache);

// Whether the driver would skip this work instead of redoing it: `row` is a completed, not
// superseded completion that wrote `destination` (absolute, as the driver names it), the output
// there still matches the fingerprint recorded at completion, it opens in GDAL, and the files
// it consists of are those recorded (output_members_json). `gdal-idem pending` and `verify` ask
// it. When an object matched by its bytes rather than a predicted ETag, `store_etag` (if given)
// gets the store's ETag, for the caller to record with Ledger::replace_etag; `opened` (if given)
// gets the output opened read-only.
bool completed_output_is_current(const LedgerRow& row, const std::string& destination,
                                 std::string* store_etag = nullptr,
                                 GDALDatasetUniquePtr* opened = nullptr);

// The output's files other than `primary` (its sidecars), as recorded at completion: canonical
// JSON, [{"path","size","mtime_ns"}] locally, [{"path","size","etag"}] on object storage, sorted
// by path. nullopt when one of them cannot be looked at (gone meanwhile).
std::optional<std::string> output_members_json(const std::string& primary, CSLConstList files);
// Whether `output`, opened at `primary`, consists of the files `recorded` at completion (always
// true for a row completed before they were recorded).
bool output_members_unchanged(GDALDataset& output, const std::string& primary,
                              const OutputFingerprint& recorded);

}  // namespace idem
