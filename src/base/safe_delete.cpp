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
#include "base/file_identity.hpp"
#include "base/paths.hpp"

namespace idem {

namespace {

// Whether `info` (of a name, not followed) is the file `file` describes.
bool matches(const struct stat& info, const KnownFile& file) {
  return S_ISREG(info.st_mode) && (!file.size || *file.size == info.st_size) &&
         (!file.mtime_ns || *file.mtime_ns == mtime_ns_of(info)) &&
         (!file.device || *file.device == info.st_dev) &&
         (!file.inode || *file.inode == info.st_ino);
}

// The directory holding `path`, by its handle; nullopt with errno (EPERM for a link another user
// could have made on the way, which is never followed).
std::optional<DirectoryHandle> open_parent(const std::string& path) {
  try {
    return DirectoryHandle::open(dirname_of(path));
  } catch (const UnsafePath&) {
    errno = EPERM;
    return std::nullopt;
  }
}

DeleteOutcome outcome_of_missing_parent() {
  if (errno == ENOENT) {
    return DeleteOutcome::k_absent;
  }
  return errno == EPERM ? DeleteOutcome::k_not_ours : DeleteOutcome::k_failed;
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
      struct stat here {};
      // The name may have been swapped for another directory between the look and the open; a
      // directory on another file system is a mount point, never IDEM's to empty.
      if (::fstat(inner.get(), &opened) != 0 || opened.st_dev != info.st_dev ||
          opened.st_ino != info.st_ino || ::fstat(dir, &here) != 0 ||
          here.st_dev != opened.st_dev || !remove_contents(inner.get(), depth + 1) ||
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
  const std::optional<DirectoryHandle> parent = open_parent(path);
  if (!parent) {
    return std::nullopt;
  }
  const std::optional<struct stat> info = parent->look(basename_of(path));
  if (!info) {
    return std::nullopt;
  }
  NameInfo look;
  look.regular = S_ISREG(info->st_mode);
  look.directory = S_ISDIR(info->st_mode);
  look.link = S_ISLNK(info->st_mode);
  look.device = info->st_dev;
  look.inode = info->st_ino;
  look.owner = info->st_uid;
  look.size = info->st_size;
  look.mtime_ns = mtime_ns_of(*info);
  return look;
}

DeleteOutcome delete_known_file_at(const DirectoryHandle& directory, const std::string& name,
                                   const KnownFile& file) {
  const std::optional<struct stat> info = directory.look(name);
  if (!info) {
    return errno == ENOENT ? DeleteOutcome::k_absent : DeleteOutcome::k_failed;
  }
  if (!matches(*info, file)) {
    return DeleteOutcome::k_not_ours;
  }
  if (::unlinkat(directory.fd(), name.c_str(), 0) != 0) {
    return errno == ENOENT ? DeleteOutcome::k_absent : DeleteOutcome::k_failed;
  }
  return DeleteOutcome::k_deleted;
}

DeleteOutcome delete_known_file(const KnownFile& file) {
  const std::optional<DirectoryHandle> parent = open_parent(file.path);
  if (!parent) {
    return outcome_of_missing_parent();
  }
  return delete_known_file_at(*parent, basename_of(file.path), file);
}

bool is_known_file_at(const DirectoryHandle& directory, const std::string& name,
                      const KnownFile& file) {
  const std::optional<struct stat> info = directory.look(name);
  return info && matches(*info, file);
}

bool is_known_file(const KnownFile& file) {
  const std::optional<DirectoryHandle> parent = open_parent(file.path);
  return parent && is_known_file_at(*parent, basename_of(file.path), file);
}

DeleteOutcome delete_own_directory_at(const DirectoryHandle& directory, const std::string& name,
                                      std::optional<uid_t> owner_uid) {
  const std::optional<struct stat> info = directory.look(name);
  if (!info) {
    return errno == ENOENT ? DeleteOutcome::k_absent : DeleteOutcome::k_failed;
  }
  if (!S_ISDIR(info->st_mode) || (owner_uid && *owner_uid != info->st_uid) ||
      info->st_dev != directory.identity().device) {
    return DeleteOutcome::k_not_ours;
  }
  const FileDescriptor opened_directory(
      ::openat(directory.fd(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat opened {};
  if (!opened_directory.valid() || ::fstat(opened_directory.get(), &opened) != 0) {
    return errno == ELOOP || errno == ENOTDIR ? DeleteOutcome::k_not_ours : DeleteOutcome::k_failed;
  }
  if (opened.st_dev != info->st_dev || opened.st_ino != info->st_ino) {
    return DeleteOutcome::k_not_ours;  // swapped between the look and the open
  }
  if (!remove_contents(opened_directory.get(), 0) ||
      ::unlinkat(directory.fd(), name.c_str(), AT_REMOVEDIR) != 0) {
    return errno == ENOENT ? DeleteOutcome::k_absent : DeleteOutcome::k_failed;
  }
  return DeleteOutcome::k_deleted;
}

int remove_empty_directory_at(const DirectoryHandle& directory, const std::string& name) {
  return ::unlinkat(directory.fd(), name.c_str(), AT_REMOVEDIR);
}

DeleteOutcome delete_own_directory(const std::string& path, std::optional<uid_t> owner_uid) {
  const std::optional<DirectoryHandle> parent = open_parent(path);
  if (!parent) {
    return outcome_of_missing_parent();
  }
  return delete_own_directory_at(*parent, basename_of(path), owner_uid);
}

}  // namespace idem
