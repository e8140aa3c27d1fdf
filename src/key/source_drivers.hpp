// SPDX-License-Identifier: MIT
// Which drivers' datasets the key can know by what they read (invariant I5, docs/keys.md
// "Drivers the key knows"). A driver's GetFileList() is a promise only some drivers keep: GTI
// lists its index and not the rasters it lists, GDALG its pipeline and not the pipeline's inputs,
// MRF its .mrf and not the .idx and data files beside it. A source whose driver is not known here
// is refused before any claim, unless IDEM_TRUST_DRIVER_FILE_LIST names it: a wrong skip onto an
// old output is worse than a refusal. The one room for that knowledge: the key of a raster source
// (source_identity.cpp) and of a load's bundle (feature_key.cpp) both ask it.
#pragma once

#include <string>

class GDALDataset;

namespace idem {

struct DriverReads {
  enum class Kind {
    k_file_list,  // the driver reads the files its GetFileList() lists, and only those
    k_vrt,        // a VRT: its XML names what it reads (vrt_reads.hpp)
    k_derived,    // DERIVED_SUBDATASET:FUNCTION:NAME: a pixel function over dataset NAME
    k_pipeline,   // a GDALG pipeline (GDAL 3.11+): its file, and the dataset it computes
    k_no_files,   // a dataset without files (MEM): known by what it holds
    k_trusted,    // not known, keyed by its file list because IDEM_TRUST_DRIVER_FILE_LIST says
    k_refused,    // not known: what it reads cannot be keyed
  };
  Kind kind = Kind::k_refused;
  std::string driver;  // the driver's short name ("" when the dataset has none)
};

// How the key learns what `dataset` reads. Reads IDEM_TRUST_DRIVER_FILE_LIST (a comma-separated
// list of driver short names, or ALL), whose bad value is a usage error.
DriverReads driver_reads(GDALDataset* dataset);

// Throws the refusal of a source read by a driver the key does not know: it names the source,
// the driver and the two ways out.
[[noreturn]] void refuse_unknown_reads(const std::string& source, const std::string& driver);

}  // namespace idem
