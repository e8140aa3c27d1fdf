// Plugin entry point: what GDAL calls when it loads gdal_IDEM.so from GDAL_DRIVER_PATH.
#include "gdal_priv.h"
#include "idem_driver.hpp"

extern "C" void GDALRegister_IDEM();

extern "C" void GDALRegister_IDEM() {
  if (!GDAL_CHECK_VERSION("IDEM")) {
    return;
  }
  idem::register_idem_driver();
}
