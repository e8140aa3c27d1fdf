// SPDX-License-Identifier: MIT
// Identity by device and inode (file_identity.hpp).
#include "base/file_identity.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace idem {

namespace {

// This process's umask, read without changing it (umask(2) can only be read by setting it, which
// another thread creating a file at that moment would see): Linux 4.7+ shows it in
// /proc/self/status; 022 where it cannot be read.
mode_t process_umask() {
  mode_t mask = 022;
  if (FILE* status = std::fopen("/proc/self/status", "re")) {
    char line[256];
    while (std::fgets(line, sizeof(line), status) != nullptr) {
      unsigned int value = 0;
      if (std::sscanf(line, "Umask: %o", &value) == 1) {
        mask = static_cast<mode_t>(value & 0777);
        break;
      }
    }
    std::fclose(status);
  }
  return mask;
}

}  // namespace

std::optional<Inode> inode_of(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    return std::nullopt;
  }
  return Inode::of(info);
}

mode_t new_file_mode() {
  return 0666 & ~process_umask();
}

mode_t replacing_file_mode(mode_t mode, uid_t owner) {
  return owner == ::geteuid() ? (mode & 0666) : new_file_mode();
}

}  // namespace idem
