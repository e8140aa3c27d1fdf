// Path helpers: absolute, lexically normalised real paths, so the same output has one name in
// the key and the ledger whatever the working directory.
#pragma once

#include <string>

namespace idem {

// Make `path` absolute against the current directory and normalise it lexically ("." and ".."
// segments, repeated slashes). Paths under /vsi prefixes are returned as given (normalised).
std::string absolute_path(const std::string& path);

// The directory part and the file name of a path, as POSIX dirname and basename split it:
// "dir/base" -> "dir", "base" -> ".", "/base" -> "/".
std::string dirname_of(const std::string& path);
std::string basename_of(const std::string& path);

// True for GDAL virtual filesystem paths (/vsis3/, /vsimem/, ...).
bool is_vsi_path(const std::string& path);

}  // namespace idem
