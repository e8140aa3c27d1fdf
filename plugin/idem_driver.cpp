// SPDX-License-Identifier: MIT
// The IDEM raster driver: CreateCopy only. describe -> key -> look up -> skip / wait / claim ->
// materialise into a temporary directory -> commit (fsync + rename) -> fenced completion.
#include "idem_driver.hpp"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "base/canonical_json.hpp"
#include "base/error.hpp"
#include "base/gdal_compat.hpp"
#include "base/paths.hpp"
#include "cpl_conv.h"
#include "cpl_string.h"
#include "creation_options.hpp"
#include "debug_report.hpp"
#include "driver_ledgers.hpp"
#include "gdal_priv.h"
#include "idem_creator.hpp"
#include "key/source_digest.hpp"
#include "key/work_key.hpp"
#include "ledger/ledger.hpp"
#include "output_datasets.hpp"
#include "store/object_store.hpp"
#include "vsiidem.hpp"
#include "warp_engine.hpp"
#include "work/atomic_output.hpp"
#include "work/lease.hpp"

namespace idem {

// Lap timer for the "timing:" debug lines (--debug on; bench/ reads them): ms since the last lap.
double lap_ms(std::chrono::steady_clock::time_point& lap) {
  const auto now = std::chrono::steady_clock::now();
  const double ms = std::chrono::duration<double, std::milli>(now - lap).count();
  lap = now;
  return ms;
}

// A duration in the RESULT domain: milliseconds, two decimals.
std::string milliseconds_text(double ms) {
  return CPLSPrintf("%.2f", ms);
}

// The FILES item of the RESULT domain: a JSON array of the output's files, the primary first.
std::string files_json(const std::vector<std::string>& files) {
  JsonValue::Array items;
  for (const std::string& file : files) {
    items.push_back(JsonValue::string(file));
  }
  return JsonValue::array(std::move(items)).dump();
}

// What a call did, on stderr as "IDEM: <message>" when the user asks (IDEM_VERBOSE=YES), else
// as a debug message (CPL_DEBUG=IDEM), which reads the same: success is not a warning.
void say_when_verbose(const std::string& message) {
  if (CPLTestBool(CPLGetConfigOption("IDEM_VERBOSE", "NO"))) {
    std::fprintf(stderr, "IDEM: %s\n", message.c_str());
    std::fflush(stderr);
  } else {
    CPLDebug("IDEM", "%s", message.c_str());
  }
}

namespace {

GDALDataset* idem_create_copy(const char* filename, GDALDataset* source, int /*strict*/,
                              compat::CreateCopyOptions options, GDALProgressFunc progress,
                              void* progress_data) {
  call_reports_reset();
  const auto started = std::chrono::steady_clock::now();
  const auto report_elapsed = [&] {
    result_report_set("ELAPSED_MS",
                      milliseconds_text(std::chrono::duration<double, std::milli>(
                                            std::chrono::steady_clock::now() - started)
                                            .count()));
  };
  const auto failed = [&](const char* kind, const std::string& message) {
    debug_report_set("OUTCOME", "FAILED");
    result_report_set("OUTCOME", "FAILED");
    result_report_set("ERROR_KIND", kind);
    result_report_set("ERROR", message);
    report_elapsed();
  };
  try {
    GDALDataset* output = nullptr;
    {
      PreDelete pre_delete(filename);  // first: whatever fails below leaves the files as they were
      IdemCreator creator(pre_delete);
      output = creator.create(filename, source, options, progress, progress_data);
    }
    report_elapsed();
    return output;
  } catch (const Error& error) {
    // A bug of IDEM's says so, and asks for a report; every other error names what to do.
    CPLError(CE_Failure, error.kind() == ErrorKind::k_usage ? CPLE_IllegalArg : CPLE_AppDefined,
             "IDEM: %s%s",
             error.kind() == ErrorKind::k_internal
                 ? "internal error (a bug in gdal-idem: please report it with the command "
                   "that failed): "
                 : "",
             error.what());
    failed(CPLString(error_kind_name(error)).toupper().c_str(), error.what());
  } catch (const std::exception& error) {
    CPLError(CE_Failure, CPLE_AppDefined, "IDEM: unexpected error: %s", error.what());
    failed("INTERNAL", error.what());
  }
  return nullptr;
}

// The IDEM driver: GDAL's, with the calling thread's reports of its last call in the RESULT and
// _DEBUG_ domains (debug_report.hpp).
class IdemDriver final : public GDALDriver {
 public:
  compat::MetadataList GetMetadata(const char* domain) override {
    return is_call_report_domain(domain) ? call_report(domain) : GDALDriver::GetMetadata(domain);
  }
  const char* GetMetadataItem(const char* name, const char* domain) override {
    return is_call_report_domain(domain) ? CSLFetchNameValue(call_report(domain), name)
                                         : GDALDriver::GetMetadataItem(name, domain);
  }
  // Setting either report to nothing empties this thread's reports, so that a program can tell
  // a call GDAL failed before calling the driver from the last call's report; they take no
  // items.
  CPLErr SetMetadata(compat::MetadataList metadata, const char* domain) override {
    if (!is_call_report_domain(domain)) {
      return GDALDriver::SetMetadata(metadata, domain);
    }
    if (CSLCount(metadata) > 0) {
      CPLError(CE_Failure, CPLE_NotSupported,
               "IDEM: the %s metadata says what the driver did; it can only be emptied", domain);
      return CE_Failure;
    }
    call_reports_reset();
    return CE_None;
  }
};

}  // namespace

void register_idem_driver() {
  declare_config_options();
  install_vsiidem_handler();
  vsiidem_set_unlink_hook(forget_before_unlink);
  vsiidem_set_use_hook(note_vsiidem_use);
  if (GDALGetDriverByName(k_driver_name) != nullptr) {
    return;
  }
  auto* driver = new IdemDriver();
  driver->SetDescription(k_driver_name);
  driver->SetMetadataItem(GDAL_DCAP_RASTER, "YES");
  driver->SetMetadataItem(GDAL_DCAP_CREATECOPY, "YES");
  driver->SetMetadataItem(GDAL_DMD_LONGNAME, "Idempotent output (gdal-idem)");
  // Relative to gdal-idem's documentation (installed in /usr/share/doc/gdal-idem), as GDAL's own
  // topics are relative to GDAL's.
  driver->SetMetadataItem(GDAL_DMD_HELPTOPIC, "docs/driver.rst");
  // Outputs may be on any GDAL virtual file system (/vsis3/, /vsimem/...), behind /vsiidem/.
  driver->SetMetadataItem(GDAL_DCAP_VIRTUALIO, "YES");
  driver->SetMetadataItem(GDAL_DMD_CREATIONOPTIONLIST, creation_option_list());
  driver->SetMetadataItem(GDAL_DMD_CREATIONDATATYPES,
                          "Byte Int8 UInt16 Int16 UInt32 Int32 UInt64 Int64 Float32 Float64 "
                          "CInt16 CInt32 CFloat32 CFloat64");
  driver->pfnCreateCopy = idem_create_copy;
  // GDALDestroyDriverManager() unloads drivers while config options (IDEM_LEDGER given with
  // --config) and the file manager are still alive: carry out deferred unlinks there.
  driver->pfnUnloadDriver = [](GDALDriver*) { vsiidem_flush_unlinks(); };
  GetGDALDriverManager()->RegisterDriver(driver);
}

}  // namespace idem
