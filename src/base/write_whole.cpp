// SPDX-License-Identifier: MIT
// Files written whole (write_whole.hpp).
#include "base/write_whole.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/error.hpp"
#include "base/file_descriptor.hpp"
#include "base/file_identity.hpp"
#include "base/paths.hpp"
#include "base/random_token.hpp"
#include "base/safe_delete.hpp"

namespace idem {

namespace {

bool write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t put = ::write(fd, text.data() + done, text.size() - done);
    if (put < 0) {
      if (errno == EINTR) {
        continue;
      }
      return false;
    }
    done += static_cast<size_t>(put);
  }
  return true;
}

}  // namespace

std::optional<std::string> read_regular_file_at(const DirectoryHandle& directory,
                                                const std::string& name) {
  const FileDescriptor fd(
      ::openat(directory.fd(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  struct stat info {};
  if (!fd.valid() || ::fstat(fd.get(), &info) != 0 || !S_ISREG(info.st_mode)) {
    return std::nullopt;
  }
  std::string text;
  char buffer[65536];
  for (;;) {
    const ssize_t got = ::read(fd.get(), buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) {
      continue;
    }
    if (got <= 0) {
      return got == 0 ? std::optional<std::string>(text) : std::nullopt;
    }
    text.append(buffer, static_cast<size_t>(got));
  }
}

WriteOutcome write_file_atomically(const DirectoryHandle& directory, const std::string& name,
                                   const std::string& text, bool only_if_changed) {
  const std::string shown = directory.name_path(name);
  const std::optional<struct stat> there = directory.look(name);
  if (there && !S_ISREG(there->st_mode)) {
    throw Error(ErrorKind::k_io, "cannot write " + shown +
                                     ": something other than a regular file is there (a link, "
                                     "a directory or a special file); remove it or write "
                                     "elsewhere");
  }
  if (there && only_if_changed && read_regular_file_at(directory, name) == text) {
    return WriteOutcome::k_unchanged;
  }
  const mode_t mode = there ? replacing_file_mode(there->st_mode, there->st_uid) : new_file_mode();
  const std::string temp = std::string(k_temp_prefix) + random_hex(12) + "." + name;
  const FileDescriptor fd(::openat(directory.fd(), temp.c_str(),
                                   O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (!fd.valid()) {
    throw Error(ErrorKind::k_io,
                "cannot create a file beside " + shown + ": " + std::strerror(errno));
  }
  struct stat made {};
  const bool written = ::fstat(fd.get(), &made) == 0 && ::fchmod(fd.get(), mode) == 0 &&
                       write_all(fd.get(), text) && ::fsync(fd.get()) == 0 &&
                       ::renameat(directory.fd(), temp.c_str(), directory.fd(), name.c_str()) == 0;
  if (!written) {
    const int error_number = errno;
    delete_known_file_at(directory, temp,
                         KnownFile{temp, std::nullopt, std::nullopt, made.st_dev, made.st_ino});
    throw Error(ErrorKind::k_io, "cannot write " + shown + ": " + std::strerror(error_number));
  }
  directory.sync();
  return WriteOutcome::k_written;
}

}  // namespace idem
