// SPDX-License-Identifier: MIT
// Path helpers: absolute, lexically normalised real paths.
#include "base/paths.hpp"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <vector>

#include "base/error.hpp"

namespace idem {

namespace {

std::string normalise(const std::string& path) {
  const bool absolute = !path.empty() && path[0] == '/';
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) {
      end = path.size();
    }
    const std::string part = path.substr(start, end - start);
    if (part.empty() || part == ".") {
      // skip
    } else if (part == "..") {
      if (!parts.empty() && parts.back() != "..") {
        parts.pop_back();
      } else if (!absolute) {
        parts.push_back(part);
      }
    } else {
      parts.push_back(part);
    }
    start = end + 1;
  }
  std::string result = absolute ? "/" : "";
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) {
      result += "/";
    }
    result += parts[i];
  }
  return result.empty() ? "." : result;
}

}  // namespace

bool is_vsi_path(const std::string& path) {
  return path.rfind("/vsi", 0) == 0;
}

std::string absolute_path(const std::string& path) {
  if (path.empty()) {
    throw Error(ErrorKind::k_usage, "empty path");
  }
  if (is_vsi_path(path)) {
    // Keep the prefix as is ("/vsis3/bucket/key"): lexical normalisation only.
    return normalise(path);
  }
  if (path[0] == '/') {
    return normalise(path);
  }
  char cwd[PATH_MAX];
  if (getcwd(cwd, sizeof(cwd)) == nullptr) {
    throw Error(ErrorKind::k_io,
                std::string("cannot read the current directory: ") + std::strerror(errno));
  }
  return normalise(std::string(cwd) + "/" + path);
}

std::string dirname_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) {
    return ".";
  }
  if (slash == 0) {
    return "/";
  }
  return path.substr(0, slash);
}

std::optional<std::vector<std::string>> directory_entries(const std::string& path) {
  DIR* handle = ::opendir(path.c_str());
  if (handle == nullptr) {
    return std::nullopt;
  }
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(handle)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") {
      names.push_back(name);
    }
  }
  const int error_number = errno;
  ::closedir(handle);
  errno = error_number;
  return names;
}

std::string basename_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool is_vsiidem_path(const std::string& path) {
  const std::string prefix = k_vsiidem_prefix;
  return path.rfind(prefix, 0) == 0 || path == prefix.substr(0, prefix.size() - 1);
}

std::string vsiidem_real_path(const std::string& vsi_path) {
  if (!is_vsiidem_path(vsi_path)) {
    return "";
  }
  const size_t prefix_size = std::string(k_vsiidem_prefix).size();
  return vsi_path.size() <= prefix_size ? std::string(".") : vsi_path.substr(prefix_size);
}

std::string vsiidem_absolute_path(const std::string& path) {
  return absolute_path(is_vsiidem_path(path) ? vsiidem_real_path(path) : path);
}

namespace {

bool is_regular_file(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

// The archive a member path inside /vsizip/ (and the like) names: "{archive}/member", or the
// shortest leading part that is a file (the local file beneath it).
std::optional<std::string> archive_beneath(const std::string& rest) {
  if (!rest.empty() && rest[0] == '{') {
    int depth = 0;
    for (size_t i = 0; i < rest.size(); ++i) {
      depth += rest[i] == '{' ? 1 : rest[i] == '}' ? -1 : 0;
      if (depth == 0) {
        return local_file_beneath(rest.substr(1, i - 1));
      }
    }
    return std::nullopt;
  }
  for (size_t end = rest.find('/', 1);; end = rest.find('/', end + 1)) {
    const std::string candidate = rest.substr(0, end);
    if (std::optional<std::string> file = local_file_beneath(candidate)) {
      if (is_regular_file(*file)) {
        return file;
      }
    }
    if (end == std::string::npos) {
      return std::nullopt;
    }
  }
}

}  // namespace

std::optional<std::string> local_file_beneath(const std::string& path) {
  if (path.empty()) {
    return std::nullopt;
  }
  static const char* const k_archives[] = {"/vsizip/", "/vsitar/", "/vsigzip/", "/vsi7z/",
                                           "/vsirar/"};
  for (const char* prefix : k_archives) {
    if (path.rfind(prefix, 0) == 0) {
      return archive_beneath(path.substr(std::strlen(prefix)));
    }
  }
  if (is_vsiidem_path(path)) {
    return local_file_beneath(vsiidem_real_path(path));
  }
  if (path.rfind("/vsisubfile/", 0) == 0) {
    const size_t comma = path.find(',');
    return comma == std::string::npos ? std::nullopt : local_file_beneath(path.substr(comma + 1));
  }
  if (path.rfind("/vsicrypt/", 0) == 0) {
    const size_t file = path.find("file=");
    return file == std::string::npos ? std::nullopt : local_file_beneath(path.substr(file + 5));
  }
  if (is_vsi_path(path)) {
    return std::nullopt;
  }
  return absolute_path(path);
}

}  // namespace idem
