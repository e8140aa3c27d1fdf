// SPDX-License-Identifier: MIT
// Identity by device and inode, never by spelling (docs/concepts.md, "handles, not names"): what
// a file is, whatever name reaches it, and the one spelling of a stat's modification time in
// nanoseconds.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace idem {

// The modification time of `info` (a struct stat, or GDAL's VSIStatBufL) in nanoseconds since
// the epoch.
template <class Stat>
int64_t mtime_ns_of(const Stat& info) {
  return int64_t(info.st_mtim.tv_sec) * 1000000000 + info.st_mtim.tv_nsec;
}

// The change time of `info` in nanoseconds since the epoch: it moves on every write and every
// chmod, and no one can set it back (an mtime can be, by `touch -d` or `cp -p`).
template <class Stat>
int64_t ctime_ns_of(const Stat& info) {
  return int64_t(info.st_ctim.tv_sec) * 1000000000 + info.st_ctim.tv_nsec;
}

// A file as the kernel knows it.
struct Inode {
  dev_t device = 0;
  ino_t inode = 0;
  bool operator==(const Inode& other) const {
    return device == other.device && inode == other.inode;
  }
  bool operator!=(const Inode& other) const { return !(*this == other); }
  static Inode of(const struct stat& info) { return Inode{info.st_dev, info.st_ino}; }
};

// The identity of what `path` names, following links as any open of it would (nullopt when
// nothing is there).
std::optional<Inode> inode_of(const std::string& path);

// Where a name lives: the directory that holds it (by identity) and the name in it. Two
// spellings of one place (through links, "..", a hard-linked directory path) have the same slot,
// whether a file is there yet or not: what SQLite's -wal will be named, say.
struct NameSlot {
  Inode directory;
  std::string name;
  bool operator==(const NameSlot& other) const {
    return directory == other.directory && name == other.name;
  }
};

// The permission bits of a file IDEM writes where nothing was: what this process's umask gives
// a new file (0666 less the umask).
mode_t new_file_mode();
// The permission bits of a file IDEM writes in place of a file of mode `mode` owned by `owner`:
// that file's read and write bits when this process's user owns it, else new_file_mode(). Never
// set-user-ID, set-group-ID, sticky or execute bits, and never another user's ownership
// (docs/concepts.md, I2): root rewriting a user's set-user-ID file makes a plain file.
mode_t replacing_file_mode(mode_t mode, uid_t owner);

}  // namespace idem
