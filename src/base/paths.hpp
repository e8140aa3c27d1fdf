// SPDX-License-Identifier: MIT
// Path helpers: absolute, lexically normalised real paths, so the same output has one name in
// the key and the ledger whatever the working directory.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace idem {

// Make `path` absolute against the current directory and normalise it lexically ("." and ".."
// segments, repeated slashes). Paths under /vsi prefixes are returned as given (normalised).
std::string absolute_path(const std::string& path);

// The directory part and the file name of a path, as POSIX dirname and basename split it:
// "dir/base" -> "dir", "base" -> ".", "/base" -> "/".
std::string dirname_of(const std::string& path);
// The names in a local directory, without "." and ".."; nullopt when it cannot be opened (errno
// says why).
std::optional<std::vector<std::string>> directory_entries(const std::string& path);
std::string basename_of(const std::string& path);

// True for GDAL virtual filesystem paths (/vsis3/, /vsimem/, ...).
bool is_vsi_path(const std::string& path);

// /vsiidem/ names (docs/vsiidem.md): /vsiidem/<path> maps to <path>, /vsiidem//abs/path for an
// absolute one.
constexpr const char* k_vsiidem_prefix = "/vsiidem/";
bool is_vsiidem_path(const std::string& path);
// "/vsiidem/a/b.tif" -> "a/b.tif", "/vsiidem//x/y" -> "/x/y", "/vsiidem/" -> "."; "" when
// `vsi_path` is not a /vsiidem/ name.
std::string vsiidem_real_path(const std::string& vsi_path);
// The key under which /vsiidem/ records a path (pending unlinks, files being written): a
// /vsiidem/ name or a real path, made absolute and lexically normalised (absolute_path).
std::string vsiidem_absolute_path(const std::string& path);

}  // namespace idem
