// SPDX-License-Identifier: MIT
// Work description -> idempotency key (docs/keys.md is the contract this file implements).
#include "key/work_key.hpp"

#include <proj.h>

#include <cstring>
#include <iterator>

#include "base/canonical_json.hpp"
#include "base/error.hpp"
#include "base/gdal_compat.hpp"
#include "base/sha256.hpp"
#include "cpl_conv.h"
#include "cpl_string.h"
#include "gdal_priv.h"
#include "key/command_line.hpp"
#include "key/source_identity.hpp"
#include "key/tile_grid.hpp"
#include "key/vrt_canonical.hpp"
#include "ogr_spatialref.h"

namespace idem {

namespace {

// Suffix gdalwarp (GDAL 3.6 gdalwarp_lib.cpp) gives the GTiff it materialises beside the
// destination when several sources are warped into a CreateCopy-only format (docs/internals.md §3).
[[maybe_unused]] constexpr const char* k_materialised_suffix = ".tmp.tif";

// Creation options that do not change the output's bytes: out of the key. The options are the
// FORMAT driver's only (the driver takes IDEM's own out first), so a FORMAT here is that
// driver's (netCDF's FORMAT=NC4, passed as netCDF.FORMAT=NC4) and is keyed like any other.
const char* const k_neutral_creation_options[] = {"NUM_THREADS"};

bool name_in(const std::string& name, const char* const* list, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    if (EQUAL(name.c_str(), list[i])) {
      return true;
    }
  }
  return false;
}

[[maybe_unused]] bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string canonical_format(const std::string& format) {
  GDALDriver* driver = GetGDALDriverManager()->GetDriverByName(format.c_str());
  return driver != nullptr ? std::string(driver->GetDescription()) : format;
}

// The cutline a gdalwarp command names (-cutline), keyed by what its files hold: it decides
// pixels as the sources do, and the command holds only its name. Null when the command names
// none, or one that is not a dataset with files of its own (a database, or from GDAL 3.9 a WKT
// geometry, which the command holds itself): the warp GDAL already ran through it then shows it
// (see describe_work).
JsonValue cutline_identity(const std::vector<std::string>& arguments,
                           const SourceIdentityOptions& options) {
  const std::vector<std::string> cutlines =
      option_values(GdalProgram::k_gdalwarp, arguments, "-cutline");
  if (cutlines.empty()) {
    return JsonValue::null();
  }
  GDALDatasetUniquePtr dataset;
  {
    CPLErrorHandlerPusher quiet(CPLQuietErrorHandler);
    CPLErrorStateBackuper keep_error_state;
    dataset.reset(GDALDataset::Open(cutlines.back().c_str(), GDAL_OF_VECTOR));
  }
  if (!dataset || CPLStringList(dataset->GetFileList()).size() == 0) {
    return JsonValue::null();
  }
  return identity_of_dataset(dataset.get(), options);
}

JsonValue creation_options_json(const KeyOptions& options) {
  JsonValue result = JsonValue::object();
  for (const auto& [raw_name, value] : options.creation_options) {
    const std::string name = CPLString(raw_name).toupper();
    if (name_in(name, k_neutral_creation_options, std::size(k_neutral_creation_options))) {
      continue;
    }
    // GDAL drivers read options with CSLFetchNameValue: the first occurrence wins.
    if (result.find(name) == nullptr) {
      result.set(name, JsonValue::string(value));
    }
  }
  return result;
}

JsonValue string_array(const std::vector<std::string>& texts) {
  JsonValue array = JsonValue::array();
  for (const std::string& text : texts) {
    array.push_back(JsonValue::string(text));
  }
  return array;
}

std::string vrt_directory(GDALDataset* src) {
  const std::string description = src->GetDescription();
  if (description.empty() || description[0] == '<') {
    return std::string();  // in memory: relative paths are relative to the working directory
  }
  VSIStatBufL info;
  if (VSIStatL(description.c_str(), &info) != 0) {
    return std::string();
  }
  return CPLGetPath(description.c_str());
}

TargetGrid target_grid(GDALDataset* src) {
  TargetGrid grid;
  grid.x_size = src->GetRasterXSize();
  grid.y_size = src->GetRasterYSize();
  grid.has_geotransform = compat::get_geotransform(src, grid.geotransform) == CE_None;
  if (const OGRSpatialReference* srs = src->GetSpatialRef()) {
    char* wkt = nullptr;
    if (srs->exportToWkt(&wkt) == OGRERR_NONE && wkt != nullptr) {
      grid.srs_wkt = wkt;
    }
    CPLFree(wkt);
    // Asked of the CRS object the dataset has (cheap), instead of parsing the WKT again later
    // for the tile index and the footprint.
    grid.web_mercator = is_web_mercator(*srs);
  }
  return grid;
}

}  // namespace

// gdalwarp's temporary GTiff for a multi-source warp that reprojects: "<destination as
// given>.tmp.tif" up to GDAL 3.11.0, "<directory>/<destination's file name>_<pid>_<counter>"
// (CPLGenerateTempFilename) since 3.11.1. A mosaic that does not reproject is handed over as a
// VRT of the sources since 3.11 (nothing is materialised then).
bool looks_materialised(GDALDataset* src, const std::string& destination) {
  const std::string description = src->GetDescription();
  GDALDriver* driver = src->GetDriver();
  if (driver == nullptr || !EQUAL(driver->GetDescription(), "GTiff")) {
    return false;
  }
#if IDEM_GDAL_MULTI_SOURCE_TEMP_IS_GENERATED
  if (destination.empty()) {
    return false;
  }
  const std::string name = CPLGetFilename(description.c_str());
  const std::string prefix = std::string(CPLGetFilename(destination.c_str())) + "_";
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) {
    return false;
  }
  const std::string rest = name.substr(prefix.size());  // <pid>_<counter>
  const size_t separator = rest.find('_');
  const auto digits = [](const std::string& text) {
    return !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
  };
  return separator != std::string::npos && digits(rest.substr(0, separator)) &&
         digits(rest.substr(separator + 1));
#else
  if (!ends_with(description, k_materialised_suffix)) {
    return false;
  }
  const std::string stem =
      description.substr(0, description.size() - std::strlen(k_materialised_suffix));
  return stem.rfind("/vsiidem/", 0) == 0 ||
         (!destination.empty() &&
          EQUAL(CPLGetFilename(stem.c_str()), CPLGetFilename(destination.c_str())));
#endif
}

std::string compute_key(const std::string& namespace_name, const std::string& canonical_json) {
  return sha256_hex(namespace_name + ":v" + std::to_string(k_algo_version) + ":" + canonical_json);
}

bool warp_copies_from_vrt(const std::string& format) {
  GDALDriver* driver = GetGDALDriverManager()->GetDriverByName(format.c_str());
  if (driver == nullptr || EQUAL(driver->GetDescription(), "COG") ||
      EQUAL(driver->GetDescription(), "VRT")) {
    return false;
  }
  return driver->GetMetadataItem(GDAL_DCAP_CREATE) == nullptr &&
         driver->GetMetadataItem(GDAL_DCAP_CREATECOPY) != nullptr;
}

bool cog_grid_options_in(const std::vector<std::pair<std::string, std::string>>& options) {
  // The first occurrence wins, as for the driver (CSLFetchNameValue).
  bool tiling_scheme_seen = false;
  for (const auto& [name, value] : options) {
    if (EQUAL(name.c_str(), "TARGET_SRS")) {
      return true;
    }
    if (EQUAL(name.c_str(), "TILING_SCHEME") && !tiling_scheme_seen) {
      tiling_scheme_seen = true;
      if (!EQUAL(value.c_str(), "CUSTOM")) {
        return true;
      }
    }
  }
  return false;
}

bool output_chooses_its_grid(const std::string& format,
                             const std::vector<std::pair<std::string, std::string>>& options) {
  return EQUAL(canonical_format(format).c_str(), "MBTiles") || cog_grid_options_in(options);
}

std::string canonical_vrt_text(const std::string& xml, const KeyOptions& options) {
  VrtCanonicalOptions vrt_options;
  vrt_options.sources.policy = options.digest_policy;
  vrt_options.sources.cache = options.digest_cache;
  vrt_options.sources.kept_sources = options.kept_sources;
  return canonical_vrt(xml, vrt_options).dump();
}

WorkDescription describe_work(GDALDataset* src, const KeyOptions& options) {
  if (src == nullptr) {
    throw Error(ErrorKind::k_usage, "the work has no source dataset");
  }
  if (options.namespace_name.empty()) {
    throw Error(ErrorKind::k_usage, "the key namespace must not be empty");
  }
  WorkDescription description;
  SourceIdentityOptions source_options;
  source_options.policy = options.digest_policy;
  source_options.cache = options.digest_cache;
  source_options.kept_sources = options.kept_sources;
  source_options.seen_files = options.source_files;

  JsonValue work = JsonValue::object();
  work.set("format", JsonValue::string(canonical_format(options.format)));
  work.set("creation_options", creation_options_json(options));
  work.set("destination", JsonValue::string(options.destination));
  if (options.include_gdal_version) {
    work.set("gdal_version", JsonValue::string(GDALVersionInfo("RELEASE_NAME")));
    work.set("proj_version", JsonValue::string(proj_info().version));
  }

  GDALDriver* driver = src->GetDriver();
  const std::string xml = driver != nullptr && EQUAL(driver->GetDescription(), "VRT")
                              ? vrt_xml_for_key(src, options.kept_sources)
                              : std::string();
  const bool is_vrt = !xml.empty();
  if (is_vrt) {
    VrtCanonicalOptions vrt_options;
    vrt_options.vrt_dir = vrt_directory(src);
    vrt_options.sources = source_options;
    JsonValue vrt = canonical_vrt(xml, vrt_options);
    const JsonValue* attributes = vrt.find("attr");
    const JsonValue* sub_class = attributes != nullptr ? attributes->find("subClass") : nullptr;
    description.is_warp = sub_class != nullptr && sub_class->text() == "VRTWarpedDataset";
    work.set("kind", JsonValue::string(description.is_warp ? "warp" : "vrt"));
    // A warp into a COG with grid options runs as gdalwarp -of COG runs it (docs/internals.md
    // §11), which outputs of earlier releases were not: keyed apart from them.
    if (description.is_warp && canonical_format(options.format) == "COG") {
      description.vrt_canonical = vrt.dump();
      description.cog_warp = options.warp_as_gdalwarp_cog || options.gdalwarp_arguments ||
                             cog_grid_options_in(options.creation_options);
      if (description.cog_warp) {
        work.set("cog_warp", JsonValue::string("gdalwarp"));
      }
    }
    work.set("vrt", std::move(vrt));
    description.vrt_xml = xml;
    // Written as the direct call writes it: copied from the warped VRT (docs/internals.md §14).
    if (description.is_warp && !options.gdalwarp_arguments &&
        warp_copies_from_vrt(options.format)) {
      work.set("warp_written", JsonValue::string("vrt_copy"));
    }
    if (options.gdalwarp_arguments) {
      work.set(description.is_warp ? "gdalwarp_warp" : "gdalwarp_mosaic",
               string_array(*options.gdalwarp_arguments));
      description.runs_gdalwarp = true;
    }
    // gdalwarp's configuration option that changes the pixels of an RPC warp (docs/internals.md
    // §10); keyed only when set to its non-default value, so other keys do not change.
    if (description.is_warp &&
        !CPLTestBool(CPLGetConfigOption("RESTRICT_OUTPUT_DATASET_UPDATE", "YES"))) {
      JsonValue config = JsonValue::object();
      config.set("RESTRICT_OUTPUT_DATASET_UPDATE", JsonValue::string("NO"));
      work.set("config", std::move(config));
    }
  } else {
    description.source_was_materialised = looks_materialised(src, options.destination);
    work.set("kind",
             JsonValue::string(description.source_was_materialised ? "materialised" : "copy"));
    if (description.source_was_materialised && options.gdalwarp_arguments &&
        !options.gdalwarp_sources.empty()) {
      // Run again from the gdalwarp program's sources: they, not GDAL's temporary file, are read.
      work.set("gdalwarp_warp", string_array(*options.gdalwarp_arguments));
      JsonValue sources = JsonValue::array();
      for (GDALDataset* dataset : options.gdalwarp_sources) {
        sources.push_back(identity_of_dataset(dataset, source_options));
      }
      work.set("sources", std::move(sources));
      // What GDAL warped from them too: the command holds only the names of the other files
      // that decide pixels (a cutline, -to RPC_DEM=, geolocation arrays), and this warp shows
      // what they held. The cutline is also keyed by its own files, which show it exactly.
      work.set("materialised", identity_of_dataset(src, source_options));
      JsonValue cutline = cutline_identity(*options.gdalwarp_arguments, source_options);
      if (cutline.type() != JsonValue::Type::k_null) {
        work.set("cutline", std::move(cutline));
      }
      description.runs_gdalwarp = true;
    } else {
      work.set("source", identity_of_dataset(src, source_options));
    }
  }

  description.grid = target_grid(src);
  description.cog_grid =
      canonical_format(options.format) == "COG" && cog_grid_options_in(options.creation_options);
  description.canonical_json = work.dump();
  description.key = compute_key(options.namespace_name, description.canonical_json);
  return description;
}

}  // namespace idem
