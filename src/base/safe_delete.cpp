// SPDX-License-Identifier: MIT
// The one owner of local deletes (safe_delete.hpp): directory-relative, never through a link.
#include "base/safe_delete.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "base/file_descriptor.hpp"
#include "base/paths.hpp"

namespace idem {

namespace {

int64_t mtime_ns_of(const struct stat& info) {
  return int64_t(info.st_mtim.tv_sec) * 1000000000 + info.st_mtim.tv_nsec;
}

// Whether `info` (of a name, not followed) is the file `file` describes.
bool matches(const struct stat& info, const KnownFile& file) {
  return S_ISREG(info.st_mode) && (!file.size || *file.size == info.st_size) &&
         (!file.mtime_ns || *file.mtime_ns == mtime_ns_of(info)) &&
         (!file.device || *file.device == info.st_dev) &&
         (!file.inode || *file.inode == info.st_ino);
}

// The directory holding `path`, opened (the caller's own path to it is taken as given).
FileDescriptor open_parent(const std::string& path) {
  return FileDescriptor(::open(dirname_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
}

// A directory's deepest nesting that IDEM itself makes is two levels (a directory dataset inside
// a temporary directory); anything much deeper was not made by IDEM.
constexpr int k_max_depth = 64;

// Removes everything inside the directory open as `dir`: files and links by unlinkat (a link is
// removed, not followed), directories opened with O_NOFOLLOW relative to `dir` and emptied first.
bool remove_contents(int dir, int depth) {
  if (depth > k_max_depth) {
    errno = ELOOP;
    return false;
  }
  const int listing_fd = ::dup(dir);
  if (listing_fd < 0) {
    return false;
  }
  DIR* listing = ::fdopendir(listing_fd);
  if (listing == nullptr) {
    ::close(listing_fd);
    return false;
  }
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(listing)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") {
      names.push_back(name);
    }
  }
  ::closedir(listing);
  bool all = true;
  for (const std::string& name : names) {
    struct stat info {};
    if (::fstatat(dir, name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0) {
      continue;  // gone meanwhile
    }
    if (S_ISDIR(info.st_mode)) {
      const FileDescriptor inner(
          ::openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!inner.valid()) {
        all = false;
        continue;
      }
      struct stat opened {};
      // The name may have been swapped for another directory between the look and the open.
      if (::fstat(inner.get(), &opened) != 0 || opened.st_dev != info.st_dev ||
          opened.st_ino != info.st_ino || !remove_contents(inner.get(), depth + 1) ||
          ::unlinkat(dir, name.c_str(), AT_REMOVEDIR) != 0) {
        all = false;
      }
    } else if (::unlinkat(dir, name.c_str(), 0) != 0 && errno != ENOENT) {
      all = false;
    }
  }
  return all;
}

}  // namespace

std::optional<NameInfo> look_without_following(const std::string& path) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) {
    return std::nullopt;
  }
  NameInfo look;
  look.regular = S_ISREG(info.st_mode);
  look.directory = S_ISDIR(info.st_mode);
  look.link = S_ISLNK(info.st_mode);
  look.device = info.st_dev;
  look.inode = info.st_ino;
  look.owner = info.st_uid;
  look.size = info.st_size;
  look.mtime_ns = mtime_ns_of(info);
  return look;
}

DeleteOutcome delete_known_file(const KnownFile& file) {
  const FileDescriptor parent = open_parent(file.path);
  if (!parent.valid()) {
    return errno == ENOENT ? DeleteOutcome::k_absent : DeleteOutcome::k_failed;
  }
  const std::string name = basename_of(file.path);
  struct stat info {};
  if (::fstatat(parent.get(), name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0) {
    return errno == ENOENT ? DeleteOutcome::k_absent : DeleteOutcome::k_failed;
  }
  if (!matches(info, file)) {
    return DeleteOutcome::k_not_ours;
  }
  if (::unlinkat(parent.get(), name.c_str(), 0) != 0) {
    return errno == ENOENT ? DeleteOutcome::k_absent : DeleteOutcome::k_failed;
  }
  return DeleteOutcome::k_deleted;
}

bool is_known_file(const KnownFile& file) {
  struct stat info {};
  return ::lstat(file.path.c_str(), &info) == 0 && matches(info, file);
}

DeleteOutcome delete_own_directory(const std::string& path, std::optional<uid_t> owner_uid) {
  const FileDescriptor parent = open_parent(path);
  if (!parent.valid()) {
    return errno == ENOENT ? DeleteOutcome::k_absent : DeleteOutcome::k_failed;
  }
  const std::string name = basename_of(path);
  struct stat info {};
  if (::fstatat(parent.get(), name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0) {
    return errno == ENOENT ? DeleteOutcome::k_absent : DeleteOutcome::k_failed;
  }
  if (!S_ISDIR(info.st_mode) || (owner_uid && *owner_uid != info.st_uid)) {
    return DeleteOutcome::k_not_ours;
  }
  const FileDescriptor directory(
      ::openat(parent.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat opened {};
  if (!directory.valid() || ::fstat(directory.get(), &opened) != 0) {
    return errno == ELOOP || errno == ENOTDIR ? DeleteOutcome::k_not_ours : DeleteOutcome::k_failed;
  }
  if (opened.st_dev != info.st_dev || opened.st_ino != info.st_ino) {
    return DeleteOutcome::k_not_ours;  // swapped between the look and the open
  }
  if (!remove_contents(directory.get(), 0) ||
      ::unlinkat(parent.get(), name.c_str(), AT_REMOVEDIR) != 0) {
    return errno == ENOENT ? DeleteOutcome::k_absent : DeleteOutcome::k_failed;
  }
  return DeleteOutcome::k_deleted;
}

}  // namespace idem
