// SPDX-License-Identifier: MIT
// A GDAL file handle (VSILFILE) owned: closed when it goes out of scope.
#pragma once

#include <memory>

#include "cpl_vsi.h"

namespace idem {

struct VsiFileCloser {
  void operator()(VSILFILE* file) const {
    if (file != nullptr) {
      VSIFCloseL(file);
    }
  }
};
using VsiFile = std::unique_ptr<VSILFILE, VsiFileCloser>;

}  // namespace idem
