// SPDX-License-Identifier: MIT
// The Google Cloud Storage upload IDEM sends itself (docs/object-storage.md, "GCS"): a resumable
// upload of GCS's XML API whose object appears only if x-goog-if-generation-match holds when it
// is finalized.
//
// GDAL's /vsigs/ writer sends an object in one PUT, which carries the condition, up to its
// largest chunk (5120 MiB), holding the whole object in memory; GDAL 3.10 and later send a larger
// one as an XML multipart upload, which GCS documents as taking no precondition. So an upload
// larger than IDEM_GCS_CHUNK_SIZE goes here instead, its requests signed with GDAL's credentials
// (gcs_signing_credentials): a POST with `x-goog-resumable: start` and the condition,
// then the bytes in chunks PUT to the session it names, each sent again from what GCS kept after
// a transient failure. GCS evaluates the condition when the last chunk completes the object: a
// refused upload replaces nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "store/http_request.hpp"

namespace idem {

// The credentials GDAL's /vsigs/ would send a request for a path with, read as GDAL reads them
// (VSIGetPathSpecificOption, else the configuration) and in GDAL's order (the same in GDAL 3.6,
// 3.10 and 3.13): GS_NO_SIGN_REQUEST=YES (no signing); GS_SECRET_ACCESS_KEY with GS_ACCESS_KEY_ID
// (an HMAC key); GS_OAUTH2_REFRESH_TOKEN (with GS_OAUTH2_CLIENT_ID and GS_OAUTH2_CLIENT_SECRET,
// or GDAL's own client); GOOGLE_APPLICATION_CREDENTIALS (a service account's or an authorized
// user's JSON file); GS_OAUTH2_PRIVATE_KEY or GS_OAUTH2_PRIVATE_KEY_FILE with
// GS_OAUTH2_CLIENT_EMAIL (a service account); the .boto file (CPL_GS_CREDENTIALS_FILE, else
// ~/.boto: its HMAC key or refresh token); then, on (potentially) a Compute Engine machine, its
// metadata server. An OAuth2 access token is got when a request is sent, with GDAL's own exported
// calls (GOA2GetAccessToken, GOA2GetAccessTokenFromServiceAccount,
// GOA2GetAccessTokenFromCloudEngineVM), so from the token endpoints GDAL's configuration names.
struct GcsCredentials {
  enum class Kind { k_unsigned, k_hmac, k_refresh_token, k_service_account, k_metadata_server };
  Kind kind = Kind::k_unsigned;
  std::string endpoint;  // CPL_GS_ENDPOINT (default https://storage.googleapis.com/), ending '/'
  std::string user_project;   // GS_USER_PROJECT: x-goog-user-project on each request, as GDAL's
  std::string source;         // where they were read, for messages ("GS_OAUTH2_REFRESH_TOKEN")
  std::string access_key_id;  // k_hmac
  std::string secret;         // k_hmac
  std::string refresh_token;  // k_refresh_token
  std::string client_id;      // k_refresh_token; empty with client_secret: GDAL's client
  std::string client_secret;  // k_refresh_token
  std::string private_key;    // k_service_account (PEM)
  std::string client_email;   // k_service_account
  std::string scope;          // k_service_account: GS_OAUTH2_SCOPE
};

// GDAL's credentials for the /vsigs/ `path` (above); nullopt when GDAL would find none or refuse
// the ones set (GS_SECRET_ACCESS_KEY without GS_ACCESS_KEY_ID, one of a client's id and secret, an
// unreadable JSON file), when the machine's metadata server comes last but a gcloud or
// BOTO_CONFIG file exists (a later GDAL could read them first), and when the user gives GDAL's
// requests headers of their own (user_http_headers_set): IDEM's requests would not carry them,
// and GDAL_HTTP_HEADER_FILE may hold GDAL's credentials.
std::optional<GcsCredentials> gcs_signing_credentials(const std::string& path);

// "Authorization: Bearer <token>" for OAuth2 credentials, got now as GDAL gets it; "" for
// credentials without a token (unsigned, HMAC). Throws idem::Error(k_io) naming the credentials'
// source when the token endpoint gives none (never the token or a secret).
std::string gcs_bearer_authorization(const GcsCredentials& credentials);

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
