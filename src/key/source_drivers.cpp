// SPDX-License-Identifier: MIT
#include "key/source_drivers.hpp"

#include <algorithm>
#include <iterator>

#include "base/error.hpp"
#include "cpl_conv.h"
#include "cpl_string.h"
#include "gdal_priv.h"

namespace idem {
namespace {

// Drivers whose datasets read exactly the files their GetFileList() gives (with the sidecars
// GDAL's PAM and overview managers add), checked driver by driver on GDAL 3.6, 3.10 and 3.13.
// Rasters: one file each, or a header and its data file (ENVI, EHdr), or one database file
// (GPKG, MBTiles). Vectors (a warp's cutline, a load's bundle): the files of one layer set.
constexpr const char* k_known_file_list_drivers[] = {
    // rasters
    "GTiff", "COG", "PNG", "JPEG", "GIF", "BMP", "WEBP", "JP2OpenJPEG", "netCDF", "HFA", "ENVI",
    "EHdr", "AAIGrid", "XYZ", "SRTMHGT", "GPKG", "MBTiles",
    // vectors
    "ESRI Shapefile", "GeoJSON", "GeoJSONSeq", "FlatGeobuf", "CSV", "KML", "SQLite", "GPX",
    "MapInfo File", "Parquet"};

bool trusted_by_option(const std::string& driver) {
  const char* value = CPLGetConfigOption("IDEM_TRUST_DRIVER_FILE_LIST", "");
  if (value == nullptr || value[0] == '\0') {
    return false;
  }
  const CPLStringList names(
      CSLTokenizeString2(value, ",", CSLT_STRIPLEADSPACES | CSLT_STRIPENDSPACES));
  for (int i = 0; i < names.size(); ++i) {
    if (EQUAL(names[i], "ALL") || EQUAL(names[i], driver.c_str())) {
      return true;
    }
    if (GetGDALDriverManager()->GetDriverByName(names[i]) == nullptr) {
      throw Error(ErrorKind::k_usage, std::string("IDEM_TRUST_DRIVER_FILE_LIST names '") +
                                          names[i] +
                                          "', which is no driver of this GDAL: give driver short "
                                          "names (gdalinfo --formats), comma-separated, or ALL");
    }
  }
  return false;
}

}  // namespace

DriverReads driver_reads(GDALDataset* dataset) {
  GDALDriver* driver = dataset->GetDriver();
  DriverReads result;
  result.driver = driver != nullptr ? driver->GetDescription() : "";
  if (EQUAL(result.driver.c_str(), "VRT")) {
    result.kind = DriverReads::Kind::k_vrt;
  } else if (EQUAL(result.driver.c_str(), "DERIVED")) {
    result.kind = DriverReads::Kind::k_derived;
  } else if (EQUAL(result.driver.c_str(), "GDALG")) {
    result.kind = DriverReads::Kind::k_pipeline;
  } else if (EQUAL(result.driver.c_str(), "MEM")) {
    result.kind = DriverReads::Kind::k_no_files;
  } else if (std::any_of(std::begin(k_known_file_list_drivers), std::end(k_known_file_list_drivers),
                         [&](const char* known) { return EQUAL(known, result.driver.c_str()); })) {
    result.kind = DriverReads::Kind::k_file_list;
  } else if (trusted_by_option(result.driver)) {
    result.kind = DriverReads::Kind::k_trusted;
  } else {
    result.kind = DriverReads::Kind::k_refused;
  }
  return result;
}

void refuse_unknown_reads(const std::string& source, const std::string& driver) {
  const std::string named =
      driver.empty() ? std::string("a dataset without a driver") : "GDAL's " + driver + " driver";
  throw Error(ErrorKind::k_source,
              "the source '" + source + "' is read through " + named +
                  ", whose list of files IDEM cannot trust to be all it reads (a change to a "
                  "file it reads without listing would be skipped onto the old output): build a "
                  "VRT of the files it reads (gdalbuildvrt, or gdal_translate -of VRT), or set "
                  "IDEM_TRUST_DRIVER_FILE_LIST=" +
                  (driver.empty() ? std::string("ALL") : driver) +
                  " to key it by the files the driver lists, at that risk (docs/keys.md, "
                  "\"Drivers the key knows\")");
}

}  // namespace idem
