// SPDX-License-Identifier: MIT
// The one owner of directory handles (directory_handle.hpp).
#include "base/directory_handle.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <pwd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <utility>

#include "base/file_descriptor.hpp"
#include "base/paths.hpp"

namespace idem {

namespace {

// The most links one resolution follows, as the kernel's own limit (MAXSYMLINKS).
constexpr int k_max_links = 40;

// openat2(2) through syscall(2): glibc 2.36 (Debian 12) has no wrapper. -1 with errno ENOSYS on a
// kernel without it (before 5.6).
int open_without_links(const std::string& path) {
#ifdef SYS_openat2
  open_how how{};
  how.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
  how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  return static_cast<int>(::syscall(SYS_openat2, AT_FDCWD, path.c_str(), &how, sizeof(how)));
#else
  (void)path;
  errno = ENOSYS;
  return -1;
#endif
}

std::string user_name(uid_t uid) {
  passwd entry{};
  passwd* found = nullptr;
  char buffer[1024];
  if (::getpwuid_r(uid, &entry, buffer, sizeof(buffer), &found) == 0 && found != nullptr) {
    return std::string(found->pw_name) + " (uid " + std::to_string(uid) + ")";
  }
  return "uid " + std::to_string(uid);
}

// The components of `path`, in order ("" and "." dropped).
void push_components(const std::string& path, std::deque<std::string>& into) {
  std::deque<std::string> parts;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t slash = path.find('/', start);
    const std::string part =
        path.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    if (slash == std::string::npos) {
      break;
    }
    start = slash + 1;
  }
  into.insert(into.begin(), parts.begin(), parts.end());
}

// The walk of a path with links in it: one component at a time, each opened O_PATH|O_NOFOLLOW;
// a link is followed when its owner (looked at through the link's own descriptor, so that the
// link read is the link judged) is root or this process's user. Returns a descriptor of the
// directory (O_RDONLY), or -1 with errno.
int walk(const std::string& absolute) {
  std::deque<std::string> todo;
  push_components(absolute, todo);
  FileDescriptor root(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root.valid()) {
    return -1;
  }
  FileDescriptor current(::dup(root.get()));
  std::string walked;  // the lexical path so far, for messages
  int links = 0;
  while (!todo.empty()) {
    const std::string part = todo.front();
    todo.pop_front();
    if (part == "..") {
      FileDescriptor parent(::openat(current.get(), "..", O_PATH | O_DIRECTORY | O_CLOEXEC));
      if (!parent.valid()) {
        return -1;
      }
      current = std::move(parent);
      const size_t slash = walked.rfind('/');
      walked = slash == std::string::npos ? std::string() : walked.substr(0, slash);
      continue;
    }
    FileDescriptor next(::openat(current.get(), part.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (!next.valid()) {
      return -1;
    }
    struct stat info {};
    if (::fstat(next.get(), &info) != 0) {
      return -1;
    }
    const std::string here = walked + "/" + part;
    if (S_ISLNK(info.st_mode)) {
      if (info.st_uid != 0 && info.st_uid != ::geteuid()) {
        throw UnsafePath(here + " is a symbolic link owned by " + user_name(info.st_uid) +
                         ": IDEM never follows a link that another user could have made (it "
                         "could lead anywhere, and be changed while the work runs); name the "
                         "real directory instead, or have root own the link");
      }
      if (++links > k_max_links) {
        errno = ELOOP;
        return -1;
      }
      char target[4096];
      const ssize_t length = ::readlinkat(next.get(), "", target, sizeof(target) - 1);
      if (length < 0) {
        return -1;
      }
      target[length] = '\0';
      push_components(target, todo);
      if (target[0] == '/') {
        current = FileDescriptor(::dup(root.get()));
        walked.clear();
      }
      continue;
    }
    if (!S_ISDIR(info.st_mode)) {
      errno = ENOTDIR;
      return -1;
    }
    current = std::move(next);
    walked = here;
  }
  return ::openat(current.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

bool proc_is_mounted() {
  static const bool mounted = ::access("/proc/self/fd", X_OK) == 0;
  return mounted;
}

}  // namespace

std::optional<DirectoryHandle> DirectoryHandle::open(const std::string& path) {
  if (path.empty()) {
    errno = ENOENT;
    return std::nullopt;
  }
  const std::string absolute = absolute_path(path);
  int fd = open_without_links(absolute);
  if (fd < 0 && (errno == ELOOP || errno == ENOSYS || errno == EPERM || errno == E2BIG ||
                 errno == EINVAL || errno == EXDEV)) {
    fd = walk(absolute);  // a link on the path (or no openat2): judged link by link
  }
  if (fd < 0) {
    return std::nullopt;
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int error_number = errno;
    ::close(fd);
    errno = error_number;
    return std::nullopt;
  }
  return DirectoryHandle(fd, absolute, info);
}

DirectoryHandle DirectoryHandle::open_or_throw(const std::string& path, const std::string& what) {
  std::optional<DirectoryHandle> handle = open(path);
  if (!handle) {
    throw Error(ErrorKind::k_io, "cannot open " + what + " " + path + ": " + std::strerror(errno));
  }
  return std::move(*handle);
}

DirectoryHandle::DirectoryHandle(int fd, std::string path, const struct stat& info)
    : m_fd(fd), m_path(std::move(path)), m_identity(Inode::of(info)), m_owner(info.st_uid) {}

DirectoryHandle::DirectoryHandle(DirectoryHandle&& other) noexcept
    : m_fd(std::exchange(other.m_fd, -1)),
      m_path(std::move(other.m_path)),
      m_identity(other.m_identity),
      m_owner(other.m_owner) {}

DirectoryHandle& DirectoryHandle::operator=(DirectoryHandle&& other) noexcept {
  if (this != &other) {
    if (m_fd >= 0) {
      ::close(m_fd);
    }
    m_fd = std::exchange(other.m_fd, -1);
    m_path = std::move(other.m_path);
    m_identity = other.m_identity;
    m_owner = other.m_owner;
  }
  return *this;
}

DirectoryHandle::~DirectoryHandle() {
  if (m_fd >= 0) {
    ::close(m_fd);
  }
}

DirectoryHandle DirectoryHandle::duplicate() const {
  const int fd = ::fcntl(m_fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) {
    throw Error(ErrorKind::k_io,
                "cannot duplicate the handle of " + m_path + ": " + std::strerror(errno));
  }
  DirectoryHandle copy(fd, m_path, {});
  copy.m_identity = m_identity;
  copy.m_owner = m_owner;
  return copy;
}

bool DirectoryHandle::still_at_path() const {
  try {
    const std::optional<DirectoryHandle> again = open(m_path);
    return again && again->identity() == m_identity;
  } catch (const UnsafePath&) {
    return false;  // a link another user made is in the way now
  }
}

std::string DirectoryHandle::reach(const std::string& name) const {
  if (!proc_is_mounted()) {
    return name_path(name);
  }
  return "/proc/self/fd/" + std::to_string(m_fd) + "/" + name;
}

std::string DirectoryHandle::reach_self() const {
  return proc_is_mounted() ? "/proc/self/fd/" + std::to_string(m_fd) : m_path;
}

std::string DirectoryHandle::name_path(const std::string& name) const {
  return (m_path == "/" ? std::string() : m_path) + "/" + name;
}

std::optional<struct stat> DirectoryHandle::look(const std::string& name) const {
  struct stat info {};
  if (::fstatat(m_fd, name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0) {
    return std::nullopt;
  }
  return info;
}

std::optional<DirectoryHandle> DirectoryHandle::child(const std::string& name) const {
  const int fd = ::openat(m_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    return std::nullopt;
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int error_number = errno;
    ::close(fd);
    errno = error_number;
    return std::nullopt;
  }
  return DirectoryHandle(fd, name_path(name), info);
}

std::optional<std::vector<std::string>> DirectoryHandle::entries() const {
  const int listing_fd = ::openat(m_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (listing_fd < 0) {
    return std::nullopt;
  }
  DIR* listing = ::fdopendir(listing_fd);
  if (listing == nullptr) {
    const int error_number = errno;
    ::close(listing_fd);
    errno = error_number;
    return std::nullopt;
  }
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(listing)) {
    const char* name = entry->d_name;
    if (std::strcmp(name, ".") != 0 && std::strcmp(name, "..") != 0) {
      names.emplace_back(name);
    }
  }
  ::closedir(listing);
  return names;
}

void DirectoryHandle::sync() const {
  if (::fsync(m_fd) != 0 && errno != EINVAL && errno != EROFS) {
    throw Error(ErrorKind::k_io, "cannot sync " + m_path + " to disk: " + std::strerror(errno) +
                                     "; the output may not be durable, retry the work");
  }
}

void sync_at(const DirectoryHandle& directory, const std::string& name) {
  const FileDescriptor file(
      ::openat(directory.fd(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!file.valid()) {
    throw Error(ErrorKind::k_io, "cannot open " + directory.name_path(name) +
                                     " to sync it: " + std::strerror(errno));
  }
  if (::fsync(file.get()) != 0) {
    const int error_number = errno;
    struct stat info {};
    const bool is_directory = ::fstat(file.get(), &info) == 0 && S_ISDIR(info.st_mode);
    if (!(is_directory && (error_number == EINVAL || error_number == EROFS))) {
      throw Error(ErrorKind::k_io, "cannot sync " + directory.name_path(name) +
                                       " to disk: " + std::strerror(error_number) +
                                       "; the output may not be durable, retry the work");
    }
  }
}

}  // namespace idem
