// SPDX-License-Identifier: MIT
// The walk of this process's open descriptors (open_descriptors.hpp).
#include "base/open_descriptors.hpp"

#include <dirent.h>

#include <cstdlib>

namespace idem {

bool for_each_open_descriptor(const std::function<bool(int fd)>& visit) {
  DIR* fds = ::opendir("/proc/self/fd");
  if (fds == nullptr) {
    return false;
  }
  const int own = ::dirfd(fds);
  while (const dirent* entry = ::readdir(fds)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == own) {
      continue;
    }
    if (visit(static_cast<int>(fd))) {
      break;
    }
  }
  ::closedir(fds);
  return true;
}

}  // namespace idem
