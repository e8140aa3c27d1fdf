// SPDX-License-Identifier: MIT
// Object stores (/vsis3/, /vsigs/, /vsiaz/, ...) as IDEM sees them: which paths are objects,
// their headers (size, ETag, checksum) fetched fresh, streaming copies between a local file and
// an object, and where a local temporary file for an object output lives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "base/error.hpp"
#include "cpl_vsi.h"

namespace idem {

// True for paths on a GDAL network filesystem (/vsis3/, /vsigs/, /vsiaz/, /vsicurl/, ...).
bool is_object_store_path(const std::string& path);

struct ObjectHeaders {
  int64_t size = -1;
  std::string etag;             // as the store sends it, quotes included
  std::string checksum_sha256;  // x-amz-checksum-sha256 (base64) when the store sends it
  std::string generation;       // x-goog-generation (GCS): the object's version, "" elsewhere
  std::string content_md5;      // Content-MD5 (base64) that Azure keeps for a blob, when sent
};

// The token a store's preconditions name an object's version by: the ETag on S3, the
// generation on GCS (x-goog-generation), "" when `headers` has none.
std::string version_token(const std::string& path, const ObjectHeaders& headers);

// What a look at an object found: the object, no object (the store said so: 404), or nothing
// known (the store could not be reached, or answered with another error: 403, 429, 5xx). "Could
// not look" is never "missing": a caller that would delete a row or keep one must tell them apart.
struct ObjectLook {
  enum class Found { k_object, k_missing, k_unknown };
  Found found = Found::k_unknown;
  ObjectHeaders headers;  // k_object only
  std::string why;        // k_unknown: what the store or the connection said
};

// Looks at the object at `path` (one request; GDAL 3.6 sends it as a 16 KB range GET rather than
// a HEAD). With `fresh`, GDAL's cached properties of the path are dropped first, so the answer
// is the store's now.
ObjectLook look_at_object(const std::string& path, bool fresh);

// The object's headers, or nullopt when there is no object at `path`; throws StoreUnreachable
// when the store could not tell (a connection error, 403, 429, 5xx): "could not look" is never
// "missing", and every output check (the skip, pending, verify, a completion) asks here.
std::optional<ObjectHeaders> object_headers(const std::string& path, bool fresh);

// The version token (version_token) of the object at `path` as the store gives it now (one
// request), "" when there is no object there or the store did not answer (an upload conditional
// on "" replaces nothing).
std::string current_object_version(const std::string& path);

// Where local temporary files of object outputs go: CPL_TMPDIR, else TMPDIR, else /tmp.
std::string local_temp_root();

// Read `file` to its end, `chunk` bytes at a time, handing each piece to `sink` (the last one
// may be short or empty). False when a read fails before the end or `sink` returns false. The
// buffer is not zero-filled: only the pages a read touches are faulted in (a zeroed
// multi-megabyte buffer cost more than uploading a 256x256 tile).
bool read_vsi_chunks(VSILFILE* file, size_t chunk,
                     const std::function<bool(const unsigned char*, size_t)>& sink);

// What copy_vsi_file sent: the number of bytes and their MD5 (lowercase hex).
struct CopiedBytes {
  int64_t size = 0;
  std::string md5;
};

// What a conditional upload may replace: the object that was at the path when it was looked at
// (its version token, version_token), or no object (an empty token).
struct ExpectedObject {
  std::string version;
};

// The precondition header that makes a write or a delete of the object at `path` happen only
// while the object is the one of version token `version` ("" for no object): S3 `If-Match:
// <ETag>` / `If-None-Match: *`, GCS `x-goog-if-generation-match: <generation>` / `: 0`. The
// header's name and value.
std::pair<std::string, std::string> version_condition(const std::string& path,
                                                      const std::string& version);

// Whether an upload of `size` bytes to `path` is sent as a conditional write (version_condition),
// which the store refuses (412) once another writer has changed the object.
// IDEM_CONDITIONAL_WRITE=AUTO (the default): every upload to /vsis3/, /vsigs/ (up to 5120 MiB)
// and /vsiaz/ or /vsiadls/ (azure_blob_name; with a shared key, up to 50,000 blocks of
// IDEM_AZURE_BLOCK_SIZE); one GDAL sends
// to /vsis3/ in parts (VSIS3_CHUNK_SIZE and larger) takes the condition on its
// CompleteMultipartUpload, sent through GDAL_HTTP_HEADERS, so not when the user set
// GDAL_HTTP_HEADERS. NO: never (for a store that rejects the headers). Throws
// idem::Error(k_usage) for another value.
bool conditional_upload_applies(const std::string& path, int64_t size);
// Whether a delete of the object at `path` can be made conditional on its version
// (version_condition on the delete): /vsis3/ and /vsigs/ with conditional writes on
// (IDEM_CONDITIONAL_WRITE=AUTO) and no GDAL_HTTP_HEADERS of the user's, which carries the header;
// /vsiaz/ and /vsiadls/ with a shared key.
bool conditional_delete_applies(const std::string& path);
// Deletes the object at `path` only if its version token is still `version`
// (conditional_delete_applies must hold): true when deleted, false when the store refused or
// failed (GDAL's error is kept quiet; the caller looks again to tell which).
bool delete_object_if_version(const std::string& path, const std::string& version);
// IDEM_CONDITIONAL_WRITE read and checked: true for AUTO (the default), false for NO; throws
// idem::Error(k_usage) naming the value and the valid ones for anything else.
bool conditional_writes_enabled();

// Every configuration option of the object stores IDEM reads (IDEM_CONDITIONAL_WRITE,
// IDEM_AZURE_BLOCK_SIZE, IDEM_GCS_CHUNK_SIZE) checked, so that a bad value is refused before any
// work: throws idem::Error(k_usage) naming the option, its value and what is valid.
void validate_store_options();

// Thrown by copy_vsi_file when the store refused a conditional upload and the object is indeed no
// longer the one expected: another writer changed it since it was looked at.
class UploadRefused : public Error {
 public:
  using Error::Error;
};

// Stream `from` into `to` through GDAL's virtual file API (either side may be an object); the
// write is complete only when this returns. With `expected`, the upload is conditional on the
// object at `to` still being that one (see conditional_upload_applies). Throws
// idem::Error(k_io) naming what failed, UploadRefused when the condition no longer held.
CopiedBytes copy_vsi_file(const std::string& from, const std::string& to,
                          const ExpectedObject* expected = nullptr);

// Predicted ETags. GDAL 3.6 drops the ETag of its uploads' responses, and asking the store for
// it costs a request per output. S3 and GCS (XML API) give an object uploaded in one PUT, without
// SSE-KMS or SSE-C, the MD5 of its bytes as its ETag, so the driver records "md5:<hex>" instead
// of asking. Whatever the store did, the prediction never makes a skip wrong: a recorded
// "md5:<hex>" matches an object whose ETag is that MD5, or (where the store's ETags are not MD5s)
// whose bytes have it, read once; the caller then records the store's own ETag.
constexpr const char* k_predicted_etag_prefix = "md5:";
// Outputs above this size are multipart uploads for some GDAL configurations, and their bytes
// are worth reading back only for small objects: their ETag is asked of the store.
constexpr int64_t k_predicted_etag_max_size = 8 << 20;

// "md5:<hex>" for what `sent` put at `path` when a prediction applies (/vsis3/ or /vsigs/, at
// most k_predicted_etag_max_size bytes), else nullopt (ask the store).
std::optional<std::string> predicted_etag(const std::string& path, const CopiedBytes& sent);

enum class EtagMatch {
  k_different,
  k_same,          // the store's ETag is the recorded one (or the predicted MD5)
  k_same_content,  // a predicted ETag the store does not use, but the bytes have that MD5
};

// Compare the ETag recorded for `path` with the object's `headers` (fetched fresh); the sizes
// are the caller's to compare first.
EtagMatch match_object_etag(const std::string& path, const ObjectHeaders& headers,
                            const std::string& recorded);

}  // namespace idem
