// SPDX-License-Identifier: MIT
// What a VRT reads: every element of a VRT's XML that names a dataset GDAL opens to make its
// pixels, with the name resolved as GDAL resolves it (GDAL 3.6 to 3.13). The one room for that
// knowledge: the key's canonical form of a VRT (vrt_canonical.cpp) and the identity of a VRT
// source (source_identity.cpp) both walk what this returns.
#pragma once

#include <string>
#include <vector>

#include "cpl_minixml.h"

namespace idem {

struct VrtRead {
  enum class Kind {
    k_source,        // a band's SourceFilename
    k_warp_source,   // a SourceDataset: a warp's (GDALWarpOptions), or a geolocation transformer's
    k_dem,           // an RPC transformer's DEMPath (-to RPC_DEM=...)
    k_geoloc_array,  // a GeoLocTransformer's X_DATASET / Y_DATASET (-geoloc, SRC_GEOLOC_ARRAY=)
    k_step_dataset,  // a VRTProcessedDataset Step's *dataset_filename* Argument (GDAL 3.9+)
  };
  Kind kind = Kind::k_source;
  // The element that names it: SourceFilename, SourceDataset or DEMPath; the MDI of a
  // geolocation array; the Argument of a processing step.
  const CPLXMLNode* node = nullptr;
  std::string name;  // the dataset's name as GDAL opens it
};

// Every dataset that `node` and its following siblings (a VRT's XML tree, or any part of it) name
// for reading, in document order. `vrt_dir`: the VRT file's directory, against which names marked
// relativeToVRT resolve ("" for a VRT made in memory: such names stay as written).
std::vector<VrtRead> vrt_reads(const CPLXMLNode* node, const std::string& vrt_dir);

// The geolocation array a GeoLocTransformer element names for `axis` ("X" or "Y": its X_DATASET
// or Y_DATASET), resolved as GDAL resolves it (GDALCreateGeoLocTransformerEx, 3.6 to 3.13):
// relative to the directory of the transformer's SourceDataset, or else of `warp_source`, when
// <axis>_DATASET_RELATIVE_TO_SOURCE says so; otherwise as written. "" when it names none.
std::string geoloc_array_name(const CPLXMLNode* geoloc_transformer, const std::string& axis,
                              const std::string& warp_source);

// The dataset an Argument of a VRTProcessedDataset's Step names (gain_dataset_filename_N,
// offset_dataset_filename_N, trimming_dataset_filename: GDAL 3.9 and later), relative to
// `vrt_dir` when the step's relativeToVRT argument says so, as GDAL resolves it; "" for an
// argument that names no dataset.
std::string processing_step_dataset_name(const CPLXMLNode* step, const CPLXMLNode* argument,
                                         const std::string& vrt_dir);

}  // namespace idem
