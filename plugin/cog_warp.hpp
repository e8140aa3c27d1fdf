// SPDX-License-Identifier: MIT
// A warp into COG with COG's grid options (TILING_SCHEME, TARGET_SRS...), done the way
// `gdalwarp -of COG` does it (docs/internals.md §11): gdalwarp folds those options into its own
// warp only when its output format is COG, which under IDEM it is not. IDEM finds the gdalwarp
// arguments that make the warped VRT it was handed, checks them by making that VRT again, and
// runs GDALWarp() itself with them and `-of COG`, so that GDAL takes every decision, as on each
// release it does. Internal to plugin/.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "cpl_string.h"
#include "gdal_priv.h"
#include "key/source_identity.hpp"
#include "key/work_key.hpp"

namespace idem {

// Canonical form of a VRT's XML, the way the key describes it (paths as source identities).
using CanonicalVrt = std::function<std::string(const std::string& xml)>;

// The gdalwarp arguments (without -of, -co and the datasets) that make, from `source`, a
// warped VRT whose canonical form is `target_canonical` (that of `target_xml`, the warped VRT
// the caller handed IDEM), tried in a few rounds, each adding the arguments for what still
// differs. nullopt when none is found (a cutline, RPC options...).
std::optional<CPLStringList> gdalwarp_arguments_for(GDALDataset* source,
                                                    const std::string& target_xml,
                                                    const std::string& target_canonical,
                                                    const CanonicalVrt& canonical);

// For a warp into COG with grid options: the gdalwarp arguments that make the warped VRT the
// caller handed IDEM (`vrt_xml`, whose canonical form is `vrt_canonical`) from `source`, the
// dataset the key opened for it. Throws idem::Error(k_usage), saying what to do instead, when
// there are none or when gdalwarp would read them otherwise for a COG (below).
CPLStringList cog_warp_arguments(GDALDataset* source, const std::string& vrt_xml,
                                 const std::string& vrt_canonical, const CanonicalVrt& canonical);

// For a warp into COG without grid options: the gdalwarp arguments when gdalwarp -of COG would
// warp otherwise than IDEM's own warp. From GDAL 3.9 it warps onto an explicit grid (-te, -tr,
// -ts) without -r with the COG's resampling (cubic unless a palette). nullopt otherwise, and
// when no arguments make the warp (IDEM's own warp is then gdalwarp's).
// Whether the running GDAL's gdalwarp warps into COG onto an explicit grid (-te, -tr, -ts) with
// the COG's resampling when -r is not given: from GDAL 3.9.
bool gdalwarp_resamples_onto_cog_grid();

std::optional<CPLStringList> cog_resampling_arguments(GDALDataset* source,
                                                      const std::string& vrt_xml,
                                                      const std::string& vrt_canonical,
                                                      const CanonicalVrt& canonical);

// Whether gdalwarp, given `arguments`, would read -te/-tr/-ts in the COG's target CRS rather than
// in the CRS of the warped VRT: it sets the COG's CRS as the warp's target CRS when the
// arguments have a grid but no -t_srs.
bool cog_grid_reinterpreted(const CPLStringList& arguments);

// How a warp into COG runs: `arguments` set when it runs as gdalwarp -of COG runs it, from
// `source`, the dataset the key opened for the warped VRT's source.
struct CogWarpPlan {
  GDALDataset* source = nullptr;
  std::optional<CPLStringList> arguments;
};

// The plan for the warp `work` of the warped VRT `vrt` into COG: cog_warp_arguments() when it has
// grid options (work.cog_warp), else cog_resampling_arguments(). When the latter finds
// arguments, the work must be keyed again with KeyOptions::warp_as_gdalwarp_cog. Throws as
// cog_warp_arguments().
CogWarpPlan plan_cog_warp(GDALDataset* vrt, const WorkDescription& work,
                          const KeptSources& kept_sources, const CanonicalVrt& canonical);

}  // namespace idem
