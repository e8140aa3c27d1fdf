// SPDX-License-Identifier: MIT
// Path helpers: absolute, lexically normalised real paths.
#include "base/paths.hpp"

#include <dirent.h>
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

}  // namespace idem
