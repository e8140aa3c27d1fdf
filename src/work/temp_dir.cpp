// SPDX-License-Identifier: MIT
// An attempt's temporary directory (temp_dir.hpp).
#include "work/temp_dir.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "base/error.hpp"
#include "base/file_descriptor.hpp"

namespace idem {

namespace {

// Why a directory cannot take new files, with what to do about it.
std::string describe_unwritable_directory(const std::string& dir, int error_number) {
  const std::string reason = std::strerror(error_number);
  switch (error_number) {
    case ENOENT:
      return "destination directory " + dir + " does not exist; create it first";
    case ENOTDIR:
      return "destination directory " + dir +
             " is not a directory (a component of the path is a regular file); "
             "choose another output path";
    case EROFS:
      return "destination directory " + dir +
             " is on a read-only filesystem; write the output to a writable location";
    case EACCES:
    case EPERM:
      return "destination directory " + dir + " is not writable (" + reason +
             "); fix its permissions or choose another output path";
    case ENOSPC:
    case EDQUOT:
      return "no space left to create a temporary directory in " + dir + " (" + reason +
             "); free some space and retry";
    default:
      return "cannot create a temporary directory in " + dir + ": " + reason;
  }
}

DirectoryHandle make_temp_dir(const DirectoryHandle& parent, const std::string& name) {
  if (::mkdirat(parent.fd(), name.c_str(), 0700) != 0) {
    const int error_number = errno;
    if (error_number == EEXIST) {
      throw Error(ErrorKind::k_io, "temporary directory " + parent.name_path(name) +
                                       " already exists; another attempt is using the same "
                                       "token (remove it with `gdal-idem reap` if stale)");
    }
    throw Error(ErrorKind::k_io, describe_unwritable_directory(parent.path(), error_number));
  }
  std::optional<DirectoryHandle> handle = parent.child(name);
  if (!handle) {
    throw Error(ErrorKind::k_io, "cannot open the temporary directory " + parent.name_path(name) +
                                     " just made: " + std::strerror(errno));
  }
  // Held until the descriptor closes (with this attempt, or its process): reap leaves it alone.
  ::flock(handle->fd(), LOCK_EX | LOCK_NB);
  return std::move(*handle);
}

}  // namespace

TempDir::TempDir(const DirectoryHandle& parent, const std::string& token)
    : m_parent(parent.duplicate()),
      m_name(std::string(k_temp_prefix) + token),
      m_handle(([&]() -> DirectoryHandle {
        if (token.empty() || token.find('/') != std::string::npos) {
          throw Error(ErrorKind::k_internal, "invalid temporary token '" + token + "'");
        }
        return make_temp_dir(m_parent, m_name);
      })()) {}

TempDir::~TempDir() {
  if (!m_removed) {
    remove();
  }
}

std::vector<std::string> TempDir::names() const {
  std::optional<std::vector<std::string>> names = m_handle.entries();
  if (!names) {
    throw Error(ErrorKind::k_io,
                "cannot list temporary directory " + path() + ": " + std::strerror(errno));
  }
  return std::move(*names);
}

bool TempDir::still_there() const {
  const std::optional<struct stat> info = m_parent.look(m_name);
  return info && Inode::of(*info) == m_handle.identity();
}

DeleteOutcome TempDir::remove() {
  m_removed = true;
  if (!still_there()) {
    return DeleteOutcome::k_absent;  // removed by a worker that took the work over
  }
  return delete_own_directory_at(m_parent, m_name);
}

bool temp_dir_is_locked(const DirectoryHandle& parent, const std::string& name) {
  const FileDescriptor directory(
      ::openat(parent.fd(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!directory.valid()) {
    return false;
  }
  if (::flock(directory.get(), LOCK_EX | LOCK_NB) != 0) {
    return errno == EWOULDBLOCK;
  }
  ::flock(directory.get(), LOCK_UN);
  return false;
}

std::string temp_token(const std::string& attempt_token, const std::string& owner) {
  return owner.empty() ? attempt_token : attempt_token + "." + owner;
}

std::string token_of_temp_dir(const std::string& name) {
  const std::string prefix = k_temp_prefix;
  if (name.rfind(prefix, 0) != 0) {
    return std::string();
  }
  const std::string token = name.substr(prefix.size());
  return token.substr(0, token.find('.'));
}

}  // namespace idem
