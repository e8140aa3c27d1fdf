// SPDX-License-Identifier: MIT
// The Google Cloud Storage upload IDEM sends itself (docs/object-storage.md, "GCS"): a resumable
// upload of GCS's XML API whose object appears only if x-goog-if-generation-match holds when it
// is finalized.
//
// GDAL's /vsigs/ writer sends an object in one PUT, which carries the condition, up to its
// largest chunk (5120 MiB), holding the whole object in memory; GDAL 3.10 and later send a larger
// one as an XML multipart upload, which GCS documents as taking no precondition. So an upload
// larger than IDEM_GCS_CHUNK_SIZE goes here instead, when IDEM can sign its requests as GDAL
// would (an HMAC key, or no signing): a POST with `x-goog-resumable: start` and the condition,
// then the bytes in chunks PUT to the session it names, each sent again from what GCS kept after
// a transient failure. GCS evaluates the condition when the last chunk completes the object: a
// refused upload replaces nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "base/http_request.hpp"

namespace idem {

// The credentials IDEM can sign a GCS request with, as GDAL reads them for a path
// (VSIGetPathSpecificOption, else the configuration), in GDAL's order: GS_NO_SIGN_REQUEST=YES (no
// signing, both keys empty), GS_SECRET_ACCESS_KEY with GS_ACCESS_KEY_ID (HMAC), or, with none of
// GDAL's other credentials set, the machine's metadata server on Google Compute Engine
// (`metadata_server`: a bearer token from GDAL's own GOA2GetAccessTokenFromCloudEngineVM, as
// GDAL gets it). `endpoint` is CPL_GS_ENDPOINT (default https://storage.googleapis.com/),
// ending with '/'.
struct GcsCredentials {
  std::string endpoint;
  std::string access_key_id;
  std::string secret;
  bool metadata_server = false;
};

// GDAL's credentials for the /vsigs/ `path` when IDEM can sign with them; nullopt for others
// (an OAuth2 refresh token, a service account, GOOGLE_APPLICATION_CREDENTIALS, a .boto file or
// gcloud's application default credentials, any of which GDAL would pick before the metadata
// server), when GS_USER_PROJECT is set (requester pays), and when the user gives GDAL's requests
// headers of their own (user_http_headers_set): IDEM's requests would not carry them.
std::optional<GcsCredentials> gcs_signing_credentials(const std::string& path);

// The size of the chunks a resumable upload sends: IDEM_GCS_CHUNK_SIZE (MiB, 1 to 5120, default
// 100; a whole number of MiB is a multiple of the 256 KiB GCS requires). An upload larger than
// one chunk is a resumable one. Throws idem::Error(k_usage) for another value.
int64_t gcs_chunk_size();

// The string an HMAC-signed request signs (GCS's XML API, "HMAC signature", the scheme GDAL's
// /vsigs/ uses): the verb, Content-MD5, Content-Type, Date, the x-goog- headers (lower-case
// "name:value\n", sorted) and the resource ("/bucket/key", encoded as in the URL). Exposed for
// its unit test.
std::string gcs_string_to_sign(const std::string& verb, const std::string& content_md5,
                               const std::string& content_type, const std::string& date,
                               const std::string& canonical_headers,
                               const std::string& canonical_resource);

// A resumable upload of the `size` bytes of `local` (any GDAL path) to `vsigs_path`, in chunks of
// `chunk_size`, the object made only if its generation is `generation` when GCS finalizes it
// ("0": only if there is none). `sink` sees each byte once GCS has kept it, in order. The final
// answer: 200 or 201 with the object's ETag and x-goog-generation, 412 when the condition did
// not hold. A session that did not end in an object is cancelled.
HttpAnswer gcs_resumable_upload(const GcsCredentials& credentials, const std::string& vsigs_path,
                                const std::string& local, int64_t size, int64_t chunk_size,
                                const std::string& generation,
                                const std::function<void(const unsigned char*, size_t)>& sink);

}  // namespace idem
