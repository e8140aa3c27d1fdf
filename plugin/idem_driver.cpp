// The IDEM raster driver (stub; being written).
#include "idem_driver.hpp"

#include "gdal_priv.h"

namespace idem {

void register_idem_driver() {
  if (GDALGetDriverByName("IDEM") != nullptr) {
    return;
  }
  auto* driver = new GDALDriver();
  driver->SetDescription("IDEM");
  driver->SetMetadataItem(GDAL_DCAP_RASTER, "YES");
  driver->SetMetadataItem(GDAL_DMD_LONGNAME, "Idempotent output (gdal-idem)");
  GetGDALDriverManager()->RegisterDriver(driver);
}

void set_dry_run_listener(DryRunListener) {}

}  // namespace idem
