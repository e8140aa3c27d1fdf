// SPDX-License-Identifier: MIT
// The IDEM driver's creation options (creation_options.hpp).
#include "creation_options.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <set>

#include "base/error.hpp"
#include "base/gdal_compat.hpp"
#include "base/labels.hpp"
#include "cpl_conv.h"
#include "cpl_string.h"
#include "key/tile_grid.hpp"
#include "store/object_store.hpp"

namespace idem {

namespace {

std::chrono::seconds parse_stale_seconds(const char* value) {
  char* end = nullptr;
  const long seconds = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || seconds < 2) {
    throw Error(ErrorKind::k_usage, std::string("IDEM_STALE_SECONDS=") + value +
                                        " is not a lease length: give whole seconds, at least 2 "
                                        "(e.g. the orchestrator's task timeout plus a margin)");
  }
  return std::chrono::seconds(seconds);
}

// A creation option of the FORMAT driver written DRIVER.OPTION=VALUE.
struct QualifiedOption {
  std::string driver;
  std::string name;
  std::string value;
};

}  // namespace

IdemOptions parse_options(CSLConstList creation_options) {
  IdemOptions options;
  std::vector<QualifiedOption> qualified;
  std::set<std::string> own_given;  // IDEM's own options seen (FORMAT, NAMESPACE...)
  if (const char* ns = CPLGetConfigOption("IDEM_NAMESPACE", nullptr)) {
    options.namespace_name = ns;
  }
  for (CSLConstList item = creation_options; item != nullptr && *item != nullptr; ++item) {
    char* raw_key = nullptr;
    const char* value = CPLParseNameValue(*item, &raw_key);
    if (raw_key == nullptr || value == nullptr) {
      CPLFree(raw_key);
      throw Error(ErrorKind::k_usage, std::string("creation option '") + *item +
                                          "' is not NAME=VALUE: write it as -co NAME=VALUE");
    }
    const std::string key = raw_key;
    CPLFree(raw_key);
    const std::string name = CPLString(key).toupper();
    // DRIVER.OPTION=VALUE: a creation option of the FORMAT driver, named unambiguously (its
    // name may be one of IDEM's own: netCDF's and Zarr's FORMAT). Checked against FORMAT below.
    const size_t dot = key.find('.');
    if (dot != std::string::npos && dot > 0 && dot + 1 < key.size() &&
        GetGDALDriverManager()->GetDriverByName(key.substr(0, dot).c_str()) != nullptr) {
      qualified.push_back({key.substr(0, dot), key.substr(dot + 1), value});
      continue;
    }
    if (name == "FORMAT" || name == "NAMESPACE" || name == "LAYER" || name == "TILE") {
      if (!own_given.insert(name).second) {
        throw Error(ErrorKind::k_usage,
                    name + " is given twice: IDEM's " + name +
                        " takes one value. A creation option of the FORMAT driver with the "
                        "same name is written with the driver's name in front, e.g. -co "
                        "FORMAT=netCDF -co netCDF." +
                        name + "=...");
      }
    }
    if (name == "FORMAT") {
      options.format = value;
    } else if (name == "NAMESPACE") {
      options.namespace_name = value;
    } else if (name == "LAYER") {
      options.layer = std::string(value);
    } else if (name == "TILE") {
      options.tile = parse_tile_index(value);
    } else {
      options.passthrough.emplace_back(key, value);
    }
  }
  for (const QualifiedOption& option : qualified) {
    if (!EQUAL(option.driver.c_str(), options.format.c_str())) {
      throw Error(ErrorKind::k_usage,
                  option.driver + "." + option.name + " is a creation option of the " +
                      option.driver + " driver, but the output driver is FORMAT=" + options.format +
                      ": name the options of FORMAT's driver");
    }
    options.passthrough.emplace_back(option.name, option.value);
  }
  // One value per option of the FORMAT driver: a second, different one would be dropped.
  std::map<std::string, std::string> seen;
  for (const auto& [key, value] : options.passthrough) {
    const auto [at, inserted] = seen.emplace(CPLString(key).toupper(), value);
    if (!inserted && at->second != value) {
      throw Error(ErrorKind::k_usage, "the creation option " + key + " is given twice (" +
                                          at->second + " and " + value + "): give it once");
    }
  }
  if (options.namespace_name.empty()) {
    throw Error(ErrorKind::k_usage, "the namespace is empty: set NAMESPACE or IDEM_NAMESPACE");
  }
  check_label("the namespace (NAMESPACE or IDEM_NAMESPACE)", options.namespace_name);
  if (options.layer) {
    check_label("LAYER", *options.layer);
  }
  options.ledger_dsn = CPLGetConfigOption("IDEM_LEDGER", "");
  if (const char* stale = CPLGetConfigOption("IDEM_STALE_SECONDS", nullptr)) {
    options.lease = parse_stale_seconds(stale);
  }
  const std::string on_busy = CPLString(CPLGetConfigOption("IDEM_ON_BUSY", "WAIT")).toupper();
  if (on_busy != "WAIT" && on_busy != "FAIL") {
    throw Error(ErrorKind::k_usage,
                "IDEM_ON_BUSY=" + on_busy + " is not valid: use WAIT (the default) or FAIL");
  }
  options.fail_when_busy = on_busy == "FAIL";
  options.durable = CPLTestBool(CPLGetConfigOption("IDEM_FSYNC", "YES"));
  validate_store_options();  // a bad IDEM_CONDITIONAL_WRITE (and the like) before any work
  options.dry_run = CPLTestBool(CPLGetConfigOption("IDEM_DRY_RUN", "NO"));
  options.digest_policy =
      parse_source_digest_policy(CPLGetConfigOption("IDEM_SOURCE_DIGEST", "AUTO"));
  options.include_gdal_version = CPLTestBool(CPLGetConfigOption("IDEM_KEY_GDAL_VERSION", "NO"));
  return options;
}

GDALDriver* find_format_driver(const std::string& format) {
  if (EQUAL(format.c_str(), k_driver_name)) {
    throw Error(ErrorKind::k_usage,
                "FORMAT=IDEM would wrap IDEM in itself: name the real output "
                "driver, e.g. FORMAT=GTiff or FORMAT=COG");
  }
  auto* driver = GetGDALDriverManager()->GetDriverByName(format.c_str());
  if (driver == nullptr || driver->GetMetadataItem(GDAL_DCAP_RASTER) == nullptr) {
    throw Error(ErrorKind::k_usage,
                "FORMAT=" + format +
                    " is not a GDAL raster driver here; `gdalinfo --formats` lists them (e.g. "
                    "GTiff, COG, PNG). IDEM's FORMAT names the output driver: a FORMAT option "
                    "of that driver is written with its name in front (-co FORMAT=netCDF -co "
                    "netCDF.FORMAT=NC4)");
  }
  if (EQUAL(driver->GetDescription(), "MEM")) {
    throw Error(ErrorKind::k_usage,
                "FORMAT=MEM writes no file, and IDEM publishes and records "
                "files: name a driver that writes one (GTiff, COG, PNG...)");
  }
  if (driver->GetMetadataItem(GDAL_DCAP_CREATE) == nullptr &&
      driver->GetMetadataItem(GDAL_DCAP_CREATECOPY) == nullptr) {
    throw Error(ErrorKind::k_usage, "FORMAT=" + format +
                                        " cannot write files (a read-only driver): name one "
                                        "that `gdalinfo --formats` lists as writable (GTiff, "
                                        "COG, PNG...)");
  }
  return driver;
}

const char* creation_option_list() {
  return "<CreationOptionList>"
         "  <Option name='FORMAT' type='string' default='GTiff' description='The real output "
         "driver (GTiff, COG, PNG, ...); its creation options pass through'/>"
         "  <Option name='NAMESPACE' type='string' default='default' description='Keeps "
         "different flows on the same inputs apart (overrides IDEM_NAMESPACE)'/>"
         "  <Option name='LAYER' type='string' description='Layer name recorded in the ledger'/>"
         "  <Option name='TILE' type='string' description='Tile index z/x/y recorded in the "
         "ledger (found automatically for WebMercatorQuad tiles)'/>"
         "  <Option name='*' type='string' description='Any other option is a creation option "
         "of the FORMAT driver'/>"
         "  <Option name='DRIVER.*' type='string' description='A creation option of the FORMAT "
         "driver with the driver name in front (e.g. netCDF.FORMAT=NC4): the way to pass one "
         "whose name is also one of IDEM&apos;s (FORMAT, NAMESPACE, LAYER, TILE)'/>"
         "</CreationOptionList>";
}

// IDEM's configuration options (docs/configuration.md), declared to GDALs that warn about
// unknown ones (3.13 with CPL_DEBUG on).
void declare_config_options() {
#if IDEM_GDAL_HAS_DECLARE_KNOWN_CONFIG_OPTION
  for (const char* name : {"IDEM_LEDGER",
                           "IDEM_NAMESPACE",
                           "IDEM_ON_BUSY",
                           "IDEM_DRY_RUN",
                           "IDEM_DRY_RUN_DIGEST_CACHE",
                           "IDEM_DIGEST_RACY_SECONDS",
                           "IDEM_FSYNC",
                           "IDEM_CONDITIONAL_WRITE",
                           "IDEM_DURABLE_CLAIM",
                           "IDEM_DURABLE_COMPLETION",
                           "IDEM_KEY_GDAL_VERSION",
                           "IDEM_LEDGER_PAGE_ROWS",
                           "IDEM_LEDGER_PREOPEN",
                           "IDEM_SOURCE_DIGEST",
                           "IDEM_STALE_SECONDS",
                           "IDEM_TRUST_DRIVER_FILE_LIST",
                           "IDEM_VERBOSE",
                           "IDEM_WARP_MULTI",
                           "IDEM_WARP_REUSE_TRANSFORMER",
                           "IDEM_TEST_PAUSE_AT",
                           "IDEM_TEST_PAUSE_SECONDS",
                           "IDEM_TEST_REACHED_FILE",
                           "IDEM_TEST_RESUME_FILE"}) {
    CPLDeclareKnownConfigOption(name, nullptr);
  }
#endif
}

}  // namespace idem
