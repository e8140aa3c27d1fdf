// SPDX-License-Identifier: MIT
// Version strings of gdal-idem and of the libraries whose behaviour can change outputs.
#include "base/version.hpp"

#include <proj.h>

#include "gdal.h"

namespace idem {

std::string idem_version() {
  return IDEM_VERSION;
}

std::string library_versions() {
  const PJ_INFO info = proj_info();
  return std::string("GDAL ") + GDALVersionInfo("RELEASE_NAME") + ", PROJ " + info.version;
}

}  // namespace idem
