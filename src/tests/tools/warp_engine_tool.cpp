// SPDX-License-Identifier: MIT
// Test driver for idem::materialise(): opens a dataset (typically a VRTWarpedDataset written by
// `gdalwarp -of VRT`, the same kind of dataset gdalwarp hands a CreateCopy-only driver) and
// materialises it with a FORMAT driver, as the IDEM driver does after claiming the work.
//
//   warp_engine_tool [-of FORMAT] [-co NAME=VALUE]... [-scratch DIR] [-cancel-at FRACTION]
//                    [-progress-log FILE] SOURCE OUTPUT
//
// Exit codes: 0 written, 2 cancelled (idem::Error mentioning "cancelled"), 1 any other failure,
// 64 usage.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "base/error.hpp"
#include "cpl_conv.h"
#include "cpl_string.h"
#include "gdal_priv.h"
#include "warp_engine.hpp"

namespace {

struct ProgressLog {
  double cancel_at = 2.0;  // never
  double last = -1.0;
  FILE* file = nullptr;
};

int CPL_STDCALL log_progress(double complete, const char*, void* data) {
  auto* log = static_cast<ProgressLog*>(data);
  log->last = complete;
  if (log->file != nullptr) {
    std::fprintf(log->file, "%.6f\n", complete);
  }
  return complete >= log->cancel_at ? FALSE : TRUE;
}

int usage() {
  std::fprintf(
      stderr,
      "usage: warp_engine_tool [-of FORMAT] [-co NAME=VALUE]... [-scratch DIR]\n"
      "                        [-cancel-at FRACTION] [-progress-log FILE] SOURCE OUTPUT\n");
  return 64;
}

}  // namespace

int main(int argc, char** argv) {
  // The warp engine is linked in: GDAL must not load the plugin's copy of it beside.
  CPLSetConfigOption("GDAL_DRIVER_PATH", "disable");
  GDALAllRegister();
  argc = GDALGeneralCmdLineProcessor(argc, &argv, 0);
  if (argc < 1) {
    return 1;
  }
  std::string format = "GTiff";
  std::string scratch_dir;
  std::string progress_log_path;
  CPLStringList creation_options;
  ProgressLog log;
  std::string source_path;
  std::string output_path;
  for (int i = 1; i < argc; ++i) {
    const char* arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (std::strcmp(arg, "-of") == 0 && has_value) {
      format = argv[++i];
    } else if (std::strcmp(arg, "-co") == 0 && has_value) {
      creation_options.AddString(argv[++i]);
    } else if (std::strcmp(arg, "-scratch") == 0 && has_value) {
      scratch_dir = argv[++i];
    } else if (std::strcmp(arg, "-cancel-at") == 0 && has_value) {
      log.cancel_at = CPLAtof(argv[++i]);
    } else if (std::strcmp(arg, "-progress-log") == 0 && has_value) {
      progress_log_path = argv[++i];
    } else if (arg[0] == '-') {
      CSLDestroy(argv);
      return usage();
    } else if (source_path.empty()) {
      source_path = arg;
    } else if (output_path.empty()) {
      output_path = arg;
    } else {
      CSLDestroy(argv);
      return usage();
    }
  }
  CSLDestroy(argv);
  if (source_path.empty() || output_path.empty()) {
    return usage();
  }

  int status = 0;
  {
    GDALDatasetUniquePtr source(
        GDALDataset::Open(source_path.c_str(), GDAL_OF_RASTER | GDAL_OF_VERBOSE_ERROR));
    GDALDriver* driver = GetGDALDriverManager()->GetDriverByName(format.c_str());
    if (!source || driver == nullptr) {
      std::fprintf(stderr, "cannot open %s or find driver %s\n", source_path.c_str(),
                   format.c_str());
      return 1;
    }
    if (!progress_log_path.empty()) {
      log.file = std::fopen(progress_log_path.c_str(), "w");
    }
    idem::MaterialiseRequest request;
    request.source = source.get();
    request.format_driver = driver;
    request.output_path = output_path;
    request.creation_options = creation_options;
    request.scratch_dir = scratch_dir;
    request.progress = log_progress;
    request.progress_data = &log;
    try {
      GDALDatasetUniquePtr output = idem::materialise(request);
      std::printf("written %s (%dx%dx%d), progress %.3f\n", output->GetDescription(),
                  output->GetRasterXSize(), output->GetRasterYSize(), output->GetRasterCount(),
                  log.last);
    } catch (const idem::Error& error) {
      std::fprintf(stderr, "materialise: %s\n", error.what());
      status = std::strstr(error.what(), "cancelled") != nullptr ? 2 : 1;
    }
    if (log.file != nullptr) {
      std::fclose(log.file);
    }
  }
  // Every dataset the engine opened must be closed by now.
  const int still_open = [] {
    GDALDatasetH* datasets = nullptr;
    int count = 0;
    GDALGetOpenDatasets(&datasets, &count);
    return count;
  }();
  if (still_open != 0) {
    std::fprintf(stderr, "leak: %d dataset(s) still open\n", still_open);
    GDALDumpOpenDatasets(stderr);
    status = status == 0 ? 3 : status;
  }
  GDALDestroyDriverManager();
  return status;
}
