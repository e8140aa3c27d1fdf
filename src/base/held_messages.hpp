// SPDX-License-Identifier: MIT
// GDAL's warnings and errors held back for a while, then passed on or dropped; or silenced.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cpl_error.h"
#include "gdal_priv.h"

namespace idem {

// While it is held, GDAL's warnings and errors raised on this thread are kept instead of
// reaching the caller's handler; debug lines go out as they come. The handler is popped by
// replay() or, whatever happens, when it goes out of scope (the messages are then dropped).
class HeldMessages {
 public:
  HeldMessages();
  ~HeldMessages();
  HeldMessages(const HeldMessages&) = delete;
  HeldMessages& operator=(const HeldMessages&) = delete;

  // Pops the handler and raises the held messages again, in order, to the caller's handler,
  // except those `drop` says to drop.
  void replay(const std::function<bool(CPLErr, const std::string&)>& drop = {});

 private:
  struct Held {
    CPLErr type;
    CPLErrorNum number;
    std::string message;
  };
  void pop();

  std::vector<Held> m_held;
  bool m_pushed = false;
};

// The message of GDAL's last error on this thread, or "no GDAL error message".
std::string last_gdal_error();

// GDALDataset::Open(path, flags) with GDAL's messages silenced, for a caller that reports what a
// failure means itself (CPLGetLastErrorMsg() still has GDAL's reason).
GDALDatasetUniquePtr open_quietly(const std::string& path, unsigned int flags);

}  // namespace idem
