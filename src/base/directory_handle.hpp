// SPDX-License-Identifier: MIT
// Handles, not names (docs/concepts.md): the one owner of directory handles. A directory is
// opened once, following no symbolic link that anyone but root or this process's user could have
// made, and kept open: every later mkdir, rename, exchange, unlink and fsync acts relative to the
// descriptor, so a directory swapped for a link (or moved) between a check and an act is never
// written through. The shape of systemd's chase() with CHASE_SAFE: one component at a time,
// O_PATH|O_NOFOLLOW, a link's owner looked at through the link's own descriptor.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "base/file_identity.hpp"

namespace idem {

// A directory could not be opened safely: a symbolic link on its path that another user could
// have made (it could lead anywhere). The work is refused; the message names the link, its owner
// and what to do.
class UnsafePath : public Error {
 public:
  explicit UnsafePath(const std::string& what) : Error(ErrorKind::k_usage, what) {}
};

class DirectoryHandle {
 public:
  // Opens the directory `path` (absolute, or relative to the working directory). Each component
  // is looked at without following it; a symbolic link is followed only when root or this
  // process's effective user owns it (only they could have made it), at most 40 links in all.
  // Throws UnsafePath for any other link; nullopt with errno set when the directory cannot be
  // opened (ENOENT, ENOTDIR, EACCES, ELOOP...). Kernels with openat2 (Linux 5.6+) open a path
  // without links in one call; others, and paths with links, are walked.
  static std::optional<DirectoryHandle> open(const std::string& path);
  // The same, throwing Error(k_io) "cannot open <what> <path>: <reason>" where open() gives
  // nullopt.
  static DirectoryHandle open_or_throw(const std::string& path, const std::string& what);

  DirectoryHandle(DirectoryHandle&& other) noexcept;
  DirectoryHandle& operator=(DirectoryHandle&& other) noexcept;
  DirectoryHandle(const DirectoryHandle&) = delete;
  DirectoryHandle& operator=(const DirectoryHandle&) = delete;
  ~DirectoryHandle();
  // Another handle on the same directory (its own descriptor).
  DirectoryHandle duplicate() const;

  int fd() const { return m_fd; }
  // The path it was opened by, absolute and lexically normalised: for messages and the ledger.
  const std::string& path() const { return m_path; }
  Inode identity() const { return m_identity; }
  uid_t owner() const { return m_owner; }

  // Whether path() still leads to this very directory, opened again the same way: false once a
  // directory on it has been moved, or swapped for a link.
  bool still_at_path() const;

  // A name GDAL (or any program of this process) can open that reaches `name` in this directory
  // whatever becomes of the directory's path: "/proc/self/fd/<fd>/<name>" (path()/<name> where
  // /proc is not mounted).
  std::string reach(const std::string& name) const;
  // The directory itself, reached the same way ("/proc/self/fd/<fd>").
  std::string reach_self() const;
  // path() + "/" + name, for messages and the ledger.
  std::string name_path(const std::string& name) const;

  // What is at `name` in it, a link not followed; nullopt (errno set) when nothing is.
  std::optional<struct stat> look(const std::string& name) const;
  // The directory `name` in it, never through a link (O_NOFOLLOW); nullopt (errno) otherwise.
  std::optional<DirectoryHandle> child(const std::string& name) const;
  // The names in it, "." and ".." left out; nullopt (errno) when it cannot be read.
  std::optional<std::vector<std::string>> entries() const;
  // Makes the renames into it durable (fsync). Throws Error(k_io); a file system that refuses
  // fsync on a directory (EINVAL, EROFS) is not an error.
  void sync() const;

 private:
  DirectoryHandle(int fd, std::string path, const struct stat& info);

  int m_fd = -1;
  std::string m_path;
  Inode m_identity;
  uid_t m_owner = 0;
};

// fsync of the file or directory `name` in `directory` (opened without following a link).
// Throws Error(k_io) naming it; EINVAL or EROFS on a directory is not an error.
void sync_at(const DirectoryHandle& directory, const std::string& name);

}  // namespace idem
