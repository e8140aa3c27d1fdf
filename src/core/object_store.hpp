// Object stores (/vsis3/, /vsigs/, /vsiaz/, ...) as IDEM sees them: which paths are objects,
// their headers (size, ETag, checksum) fetched fresh, streaming copies between a local file and
// an object, and where a local temporary file for an object output lives.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace idem {

// True for paths on a GDAL network filesystem (/vsis3/, /vsigs/, /vsiaz/, /vsicurl/, ...).
bool is_object_store_path(const std::string& path);

struct ObjectHeaders {
  int64_t size = -1;
  std::string etag;             // as the store sends it, quotes included
  std::string checksum_sha256;  // x-amz-checksum-sha256 (base64) when the store sends it
};

// The object's headers, or nullopt when there is no object at `path`. With `fresh`, GDAL's
// cached properties of the path are dropped first, so the answer is the store's now (one
// request; GDAL 3.6 sends it as a 16 KB range GET rather than a HEAD).
std::optional<ObjectHeaders> object_headers(const std::string& path, bool fresh);

// Where local temporary files of object outputs go: CPL_TMPDIR, else TMPDIR, else /tmp.
std::string local_temp_root();

// Stream `from` into `to` through GDAL's virtual file API (either side may be an object); the
// write is complete only when this returns. Throws idem::Error(k_io) naming what failed.
void copy_vsi_file(const std::string& from, const std::string& to);

}  // namespace idem
