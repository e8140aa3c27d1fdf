// SPDX-License-Identifier: MIT
// Version strings of gdal-idem and of the libraries whose behaviour can change outputs.
#pragma once

#include <string>

namespace idem {

std::string idem_version();
// "GDAL 3.6.2, PROJ 9.1.1": what may re-key when IDEM_KEY_GDAL_VERSION is on, and what
// `gdal-idem --version` prints.
std::string library_versions();

}  // namespace idem
