// SPDX-License-Identifier: MIT
// Plugin entry point: what GDAL calls when it loads gdal_IDEM.so from GDAL_DRIVER_PATH.
#include "gdal_priv.h"
#include "idem_driver.hpp"

// GDAL finds the entry point by this name (GDALRegister_ and the file's name).
extern "C" void GDALRegister_IDEM();  // NOLINT(readability-identifier-naming)

extern "C" void GDALRegister_IDEM() {  // NOLINT(readability-identifier-naming)
  if (!GDAL_CHECK_VERSION("IDEM")) {
    return;
  }
  idem::register_idem_driver();
}
