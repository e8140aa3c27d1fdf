// SPDX-License-Identifier: MIT
// Materialising the work: warp the way gdalwarp's direct mode does (docs/internals.md §8-9), or
// CreateCopy for non-warped sources; COG and other CreateCopy-only formats go through a
// temporary GTiff.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gdal_priv.h"
#include "key/source_identity.hpp"

namespace idem {

// A warp's options read from its VRT ahead of the warp: cloned with the transformer the VRT's
// maker built (borrowed from the VRT), or deserialised, which builds a transformer (PROJ's work,
// worth overlapping with a wait such as the ledger's answer to the claim).
// Opaque; owns the options, their source reference and any transformer it built.
class PreparedWarp;
struct PreparedWarpDeleter {
  void operator()(PreparedWarp* warp) const;
};
using PreparedWarpPtr = std::unique_ptr<PreparedWarp, PreparedWarpDeleter>;

// The dataset a warped VRT (gdalwarp's, gdal.Warp's, rasterio's WarpedVRT) reads from, as the
// caller holds it; nullptr when not a warped VRT or where GDAL offers no way to it (GDAL 3.6
// only, see adopt_vrt_warp in warp_engine.cpp).
GDALDataset* warped_vrt_source(GDALDataset* vrt);

// The dataset the key opened for the source of the warped VRT `vrt` (`vrt_xml` its XML), the one
// the warp reads; nullptr when there is none (not a warped VRT, or open options for the source).
GDALDataset* kept_warp_source(GDALDataset* vrt, const std::string& vrt_xml,
                              const KeptSources& kept_sources);

// The warp options of `source` when it is a warped VRT (`vrt_xml` and `kept_sources` as in
// MaterialiseRequest), else nullptr. Throws idem::Error as materialise() would.
PreparedWarpPtr prepare_warp(GDALDataset* source, const std::string* vrt_xml,
                             const KeptSources* kept_sources);

// What a materialisation did: the driver's _DEBUG_ metadata (docs/configuration.md).
struct MaterialiseReport {
  bool warped = false;             // through a warp, else a CreateCopy
  bool options_adopted = false;    // the warp options and transformer of the warped VRT itself
  bool ran_vrt_operation = false;  // the warped VRT's own warp operation ran the warp
  bool kept_source = false;        // the warp read the dataset the key opened
  bool ran_gdalwarp = false;       // GDALWarp() ran it (COG grid options, gdalwarp's mosaic)
  bool copied_vrt = false;  // the format's CreateCopy read the warped VRT (warp_copies_from_vrt)
};

struct MaterialiseRequest {
  GDALDataset* source = nullptr;        // what CreateCopy was handed
  GDALDriver* format_driver = nullptr;  // the real output driver (FORMAT=)
  std::string output_path;              // the temporary path to write the primary file at
  CPLStringList creation_options;       // pass-through options for the format driver
  // Where intermediate files (the GTiff feeding COG) may be written; inside the temporary dir.
  std::string scratch_dir;
  // Sources the key computation opened: the warp uses the one its VRT names instead of opening
  // it again, unless the VRT gives open options for it.
  const KeptSources* kept_sources = nullptr;
  // The source's xml:VRT as the key described it (saves serialising the VRT again); null to ask
  // the source.
  const std::string* vrt_xml = nullptr;
  // prepare_warp()'s answer for this source, used (once) instead of reading the options again;
  // null to read them here. Ignored for a VRT output, which is the serialisation itself.
  PreparedWarp* prepared_warp = nullptr;
  // A warp that GDALWarp() runs itself, with -of FORMAT, on `gdalwarp_sources`: into COG with
  // COG's grid options (cog_warp.hpp; the arguments make the warped VRT `source`, from the dataset
  // the key opened), or gdalwarp's plain mosaic (gdalwarp_rules.hpp; its own arguments).
  const std::vector<std::string>* gdalwarp_arguments = nullptr;
  std::vector<GDALDataset*> gdalwarp_sources;
  GDALProgressFunc progress = GDALDummyProgress;
  void* progress_data = nullptr;
  // Filled in when set.
  MaterialiseReport* report = nullptr;
};

// Write the output; returns it opened (in update or read mode, as the driver gives it) or throws
// idem::Error. Returns with progress having reached 1.0. Cancellation through the progress
// callback throws idem::Error(k_io) with "cancelled" in the message.
GDALDatasetUniquePtr materialise(const MaterialiseRequest& request);

}  // namespace idem
