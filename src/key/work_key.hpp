// SPDX-License-Identifier: MIT
// Work description -> idempotency key: the public face of key derivation (docs/keys.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "key/source_digest.hpp"
#include "key/source_identity.hpp"

class GDALDataset;

namespace idem {

// Bump when anything that goes into the canonical work description changes; docs/keys.md says how.
constexpr int k_algo_version = 2;

struct KeyOptions {
  std::string namespace_name = "default";
  std::string format = "GTiff";  // the real output driver (FORMAT=)
  std::vector<std::pair<std::string, std::string>> creation_options;  // pass-through, as given
  std::string destination;  // real output path/URI, made absolute
  SourceDigestPolicy digest_policy = SourceDigestPolicy::k_auto;
  bool include_gdal_version = false;                // IDEM_KEY_GDAL_VERSION
  DigestCache* digest_cache = nullptr;              // may be null: no caching
  KeptSources* kept_sources = nullptr;              // may be null: sources closed once identified
  std::vector<SourceFile>* source_files = nullptr;  // when set, every source file is added
  // Set by the plugin when a warp into COG without grid options runs as gdalwarp -of COG runs
  // it all the same (keyed "cog_warp", as with grid options).
  bool warp_as_gdalwarp_cog = false;
  // Set by the plugin when the output is written by GDALWarp() with the gdalwarp program's own
  // options (less those that change nothing in the output), which outputs of earlier releases
  // were not: a plain mosaic (a VRT made in memory, not warped; keyed "gdalwarp_mosaic"), a warp
  // into COG (a warped VRT; keyed "gdalwarp_warp" and "cog_warp"), or, with `gdalwarp_sources`,
  // several sources GDAL warped into a temporary file before calling the driver (keyed
  // "gdalwarp_warp" and "sources", beside the temporary file as "materialised").
  std::optional<std::vector<std::string>> gdalwarp_arguments;
  std::vector<GDALDataset*> gdalwarp_sources;
};

// The target grid of the work, for the ledger's footprint and tile columns.
struct TargetGrid {
  int x_size = 0;
  int y_size = 0;
  double geotransform[6] = {0, 1, 0, 0, 0, 1};
  bool has_geotransform = false;
  std::string srs_wkt;  // empty when the output has no CRS
  // Whether the CRS is EPSG:3857 (the same CRS, whatever its definition's spelling), when the
  // grid's maker knew it from the CRS object; unset: found from srs_wkt when needed.
  std::optional<bool> web_mercator;
};

struct WorkDescription {
  std::string canonical_json;  // sorted keys, no whitespace; what the key hashes
  std::string key;             // lowercase hex SHA-256 of "namespace:v<ALGO>:" + canonical_json
  TargetGrid grid;
  bool is_warp = false;  // the source is a VRTWarpedDataset
  std::string vrt_xml;   // the source's xml:VRT when it is a VRT (what was described)
  // The source is a temporary dataset GDAL materialised before calling the driver (multi-source
  // gdalwarp, docs/internals.md §3): the claim necessarily comes after the work.
  bool source_was_materialised = false;
  // The output is a COG with COG's grid options (cog_grid_options_in()): the COG's grid is not
  // `grid`. A warp then runs as `gdalwarp -of COG` runs it (keyed "cog_warp", as with
  // KeyOptions::warp_as_gdalwarp_cog). For any warp into COG, `vrt_canonical` holds the canonical
  // form of its VRT, for the plugin's round trip.
  bool cog_grid = false;
  bool cog_warp = false;
  std::string vrt_canonical;
  // Written by GDALWarp() with gdalwarp's options (KeyOptions::gdalwarp_arguments).
  bool runs_gdalwarp = false;
};

// Whether `src` is the GTiff gdalwarp warped several sources into before calling the driver of
// `destination` (docs/internals.md §3).
bool looks_materialised(GDALDataset* src, const std::string& destination);

// Whether COG creation options make the COG driver choose the grid itself: TARGET_SRS, or a
// TILING_SCHEME other than CUSTOM (the other grid options act only with one of those).
bool cog_grid_options_in(const std::vector<std::pair<std::string, std::string>>& options);

// Whether the output's driver lays out its own grid instead of the work's, so that an output of
// another size is still the work's: MBTiles (always the tiles of one web-mercator zoom level), and
// COG or GPKG under grid options (cog_grid_options_in). The skip and `verify` compare an output's
// size with the work's grid only when this is false.
bool output_chooses_its_grid(const std::string& format,
                             const std::vector<std::pair<std::string, std::string>>& options);

// Whether GDAL writes a warp into `format` as a CreateCopy from the warped VRT, reading its pixels
// block by block through the VRT: a format whose driver has CreateCopy and no Create, COG aside
// (docs/internals.md §14). A warp into such a format through IDEM is written the same way, so its
// pixels are those of the direct call (`gdalwarp -of PNG`, `gdal.Warp(format="PNG")`); keyed
// ("warp_written": "vrt_copy") apart from the outputs of earlier releases, which warped first.
bool warp_copies_from_vrt(const std::string& format);

// The canonical form describe_work() gives a warped VRT made in memory from `xml` (the sources
// identified as `options` says), as text: two VRTs that describe the same work compare equal.
std::string canonical_vrt_text(const std::string& xml, const KeyOptions& options);

// Describe the CreateCopy source `src` plus the options into canonical work JSON and a key.
// Throws idem::Error (k_usage for bad CRS/options, k_source for unreadable sources).
WorkDescription describe_work(GDALDataset* src, const KeyOptions& options);

// The key for a canonical JSON under a namespace (exposed for tests and `gdal-idem explain`).
std::string compute_key(const std::string& namespace_name, const std::string& canonical_json);

}  // namespace idem
