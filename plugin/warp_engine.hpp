// Materialising the work: warp the way gdalwarp's direct mode does (DESIGN.md facts 11-12), or
// CreateCopy for non-warped sources; COG and other CreateCopy-only formats go through a
// temporary GTiff.
#pragma once

#include <string>

#include "core/source_identity.hpp"
#include "gdal_priv.h"

namespace idem {

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
  GDALProgressFunc progress = GDALDummyProgress;
  void* progress_data = nullptr;
};

// Write the output; returns it opened (in update or read mode, as the driver gives it) or throws
// idem::Error. Returns with progress having reached 1.0. Cancellation through the progress
// callback throws idem::Error(k_io) with "cancelled" in the message.
GDALDatasetUniquePtr materialise(const MaterialiseRequest& request);

}  // namespace idem
