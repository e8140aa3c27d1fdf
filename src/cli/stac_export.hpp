// SPDX-License-Identifier: MIT
// gdal-idem export --format stac DIR: the ledger's completed outputs as a static STAC catalog
// (STAC 1.1.0; docs/cli.md, `gdal-idem export --format stac`).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cli.hpp"
#include "key/work_key.hpp"
#include "ledger/ledger.hpp"

namespace idem::cli {

// The grid a row's output has: the target grid of its work description, else the output's own
// (opened), else nullopt.
std::optional<TargetGrid> output_grid_of(const LedgerRow& row);

// What an export wrote: items written (new or changed), kept unchanged, removed, collections.
struct StacCounts {
  int64_t written = 0;
  int64_t unchanged = 0;
  int64_t removed = 0;
  int64_t collections = 0;
  int64_t without_footprint = 0;
};

// Writes DIR/catalog.json, one DIR/<collection>/collection.json per namespace (and layer), and
// one DIR/<collection>/items/<key>.json per completed, not superseded row of `rows`. A file is
// written only when its content changes, each whole (write_file_atomically) and through the
// destination guard (never a file of the ledger `ledger_dsn`, never over a link), every
// directory held by its handle; items of rows no longer there are removed (only regular files
// named <key>.json, never through a link). Throws idem::Error naming what failed.
StacCounts write_stac_catalog(const std::string& directory, const std::vector<LedgerRow>& rows,
                              const std::string& ledger_dsn);

}  // namespace idem::cli
