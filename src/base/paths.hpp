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

// The local file at the bottom of a chain of GDAL's archive and wrapper file systems, the file a
// read of `path` really reads: /vsizip/, /vsitar/, /vsigzip/, /vsi7z/, /vsirar/ (the archive,
// braces or not), /vsisubfile/OFFSET_SIZE,FILE, /vsicrypt/...file=FILE and /vsiidem/, in any
// chain. A local path is its own bottom; nullopt when the bottom is not a local file (an object,
// /vsimem/, an archive that is not there).
std::optional<std::string> local_file_beneath(const std::string& path);

// Every temporary name IDEM makes starts with this: an attempt's temporary directory
// (".idem-tmp-<token>", work/temp_dir.hpp) and the temporary file of a file written whole
// (".idem-tmp-<token>.<name>", base/write_whole.hpp). `gdal-idem reap` and /vsiidem/'s listings
// know IDEM's own names by it.
constexpr const char* k_temp_prefix = ".idem-tmp-";

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
