// SPDX-License-Identifier: MIT
// A file copied whole (file_copy.hpp).
#include "base/file_copy.hpp"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "base/error.hpp"
#include "base/file_identity.hpp"

namespace idem {

void copy_file_contents(const std::string& from, const std::string& to) {
  const int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (in < 0) {
    throw Error(ErrorKind::k_io, "cannot open " + from + " to update it: " + std::strerror(errno));
  }
  struct stat info {};
  ::fstat(in, &info);
  const mode_t mode = replacing_file_mode(info.st_mode, info.st_uid);
  const int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (out < 0) {
    const int error_number = errno;
    ::close(in);
    throw Error(ErrorKind::k_io, "cannot create " + to + ": " + std::strerror(error_number));
  }
  bool copied = false;
#ifdef FICLONE
  copied = ::ioctl(out, FICLONE, in) == 0;
#endif
  // Not zero-filled (as copy_vsi_file): only the pages a read touches are faulted in.
  constexpr size_t k_chunk = 1 << 20;
  const std::unique_ptr<char[]> buffer(copied ? nullptr : new char[k_chunk]);
  while (!copied) {
    const ssize_t got = ::read(in, buffer.get(), k_chunk);
    if (got == 0) {
      copied = true;
      break;
    }
    if (got < 0) {
      if (errno == EINTR) {
        continue;
      }
      break;
    }
    ssize_t done = 0;
    while (done < got) {
      const ssize_t put = ::write(out, buffer.get() + done, static_cast<size_t>(got - done));
      if (put < 0) {
        if (errno == EINTR) {
          continue;
        }
        break;
      }
      done += put;
    }
    if (done < got) {
      break;
    }
  }
  const int error_number = errno;
  ::fchmod(out, mode);
  ::close(in);
  if (::close(out) != 0 || !copied) {
    throw Error(ErrorKind::k_io, "cannot copy " + from + " to " + to + ": " +
                                     std::strerror(error_number ? error_number : EIO));
  }
}

}  // namespace idem
