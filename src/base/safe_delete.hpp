// SPDX-License-Identifier: MIT
// Invariant I1, "IDEM deletes only what it made or recorded" (docs/concepts.md): the one place
// where IDEM removes local files. Every delete of the commit protocol, of a takeover, of
// `gdal-idem reap` and `gdal-idem forget` goes through these functions. Each works relative to
// the directory that holds the name (openat/unlinkat), never follows a symbolic link at the
// name or below it, and removes a recorded file only while it is still the file recorded.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "base/directory_handle.hpp"

namespace idem {

// What IDEM knows of a file it may delete: what it looked like when IDEM made or recorded it.
// Unset members are not compared; a regular file is always required.
struct KnownFile {
  std::string path;
  std::optional<int64_t> size;
  std::optional<int64_t> mtime_ns;
  std::optional<dev_t> device;
  std::optional<ino_t> inode;
};

enum class DeleteOutcome {
  k_deleted,
  k_absent,    // nothing at the path
  k_not_ours,  // a link, a special file, a directory where a file was recorded, or another file
  k_failed,    // the system refused (errno says why)
};

// Removes `name` from `directory` if it is a regular file (not a link) that matches every member
// of `file` that is set (`file.path` is not looked at).
DeleteOutcome delete_known_file_at(const DirectoryHandle& directory, const std::string& name,
                                   const KnownFile& file);
// The same for `file.path`, through the handle of the directory that holds it (opened as
// DirectoryHandle::open does: a link another user could have made on the way is not followed,
// and the outcome is then k_not_ours).
DeleteOutcome delete_known_file(const KnownFile& file);

// Whether `name` in `directory` (or `file.path`) is, now, a regular file (not a link) matching
// every member of `file` set.
bool is_known_file_at(const DirectoryHandle& directory, const std::string& name,
                      const KnownFile& file);
bool is_known_file(const KnownFile& file);

// Removes a directory IDEM created (a temporary directory named ".idem-tmp-...") with everything
// in it. The directory itself must be a real directory, not a link; inside it, links are removed
// as links and never followed, subdirectories are opened with O_NOFOLLOW and never on another
// file system (a mount point inside is left, and the removal fails), so nothing outside the
// directory can be reached. `owner_uid` (if set) must own the directory.
DeleteOutcome delete_own_directory_at(const DirectoryHandle& directory, const std::string& name,
                                      std::optional<uid_t> owner_uid = std::nullopt);
DeleteOutcome delete_own_directory(const std::string& path,
                                   std::optional<uid_t> owner_uid = std::nullopt);

// Removes the empty directory `name` in `directory` (rmdir, never through a link): 0, or -1
// with errno (ENOTEMPTY when something is in it, ENOTDIR for anything but a directory).
int remove_empty_directory_at(const DirectoryHandle& directory, const std::string& name);

// What `lstat` says of a path, never following a link at the name: nullopt when absent.
struct NameInfo {
  bool regular = false;
  bool directory = false;
  bool link = false;
  dev_t device = 0;
  ino_t inode = 0;
  uid_t owner = 0;
  int64_t size = 0;
  int64_t mtime_ns = 0;
};
std::optional<NameInfo> look_without_following(const std::string& path);

}  // namespace idem
