// SPDX-License-Identifier: MIT
// A conditional resumable upload to GCS (gcs_upload.hpp). Follows GCS's XML API reference:
// "POST Object (resumable)", "Perform resumable uploads", "Request preconditions" and the HMAC
// signature GDAL's /vsigs/ signs its own requests with.
#include "base/gcs_upload.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "base/error.hpp"
#include "cpl_conv.h"
#include "cpl_http.h"
#include "cpl_multiproc.h"
#include "cpl_string.h"
#include "cpl_vsi.h"

namespace idem {

namespace {

constexpr const char* k_prefix = "/vsigs/";

// The headers of a request to the object `name` ("bucket/key"): with `bearer` (an Authorization
// header) when there is one, else signed when there is a key. `goog` holds its x-goog- headers,
// names in lower case, sorted.
std::vector<std::string> signed_headers(
    const GcsCredentials& credentials, const std::string& bearer, const std::string& verb,
    const std::string& content_type, const std::string& name,
    const std::vector<std::pair<std::string, std::string>>& goog) {
  const std::string date = http_date();
  std::vector<std::string> headers = {"Date: " + date, "Content-Type: " + content_type};
  std::string canonical;
  for (const auto& [header, value] : goog) {
    headers.push_back(header + ": " + value);
    canonical += header + ":" + value + "\n";
  }
  if (!bearer.empty()) {
    headers.push_back(bearer);
  } else if (!credentials.access_key_id.empty()) {
    const std::string to_sign =
        gcs_string_to_sign(verb, "", content_type, date, canonical, "/" + encode_url_path(name));
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int mac_size = 0;
    HMAC(EVP_sha1(), credentials.secret.data(), static_cast<int>(credentials.secret.size()),
         reinterpret_cast<const unsigned char*>(to_sign.data()), to_sign.size(), mac, &mac_size);
    headers.push_back("Authorization: GOOG1 " + credentials.access_key_id + ":" +
                      base64_of(mac, mac_size));
  }
  return headers;
}

// The bytes a session has kept, from a 308 answer's Range ("bytes=0-N": N + 1; none: 0).
int64_t kept_bytes(const HttpAnswer& answer) {
  const std::string range = answer.header("Range");
  const size_t dash = range.rfind('-');
  if (range.rfind("bytes=", 0) != 0 || dash == std::string::npos) {
    return 0;
  }
  return std::strtoll(range.c_str() + dash + 1, nullptr, 10) + 1;
}

bool exists(const std::string& file) {
  VSIStatBufL info;
  return !file.empty() && VSIStatL(file.c_str(), &info) == 0;
}

// Whether GDAL signs its requests for `path` with a token from the machine's metadata server:
// on (potentially) a Compute Engine machine, when none of the credentials GDAL tries before it
// is there. IDEM looks for more of them than some GDAL releases read (gcloud's application
// default credentials), so that it never signs with the machine's account where GDAL would
// have used another.
bool gcs_metadata_server_is_gdals(const std::string& path) {
  for (const char* name :
       {"GS_OAUTH2_REFRESH_TOKEN", "GOOGLE_APPLICATION_CREDENTIALS", "GS_OAUTH2_PRIVATE_KEY",
        "GS_OAUTH2_PRIVATE_KEY_FILE", "GS_OAUTH2_CLIENT_EMAIL", "CPL_GS_CREDENTIALS_FILE"}) {
    if (!std::string(VSIGetPathSpecificOption(path.c_str(), name, "")).empty()) {
      return false;
    }
  }
  const std::string home = CPLGetConfigOption("HOME", "");
  const std::string boto = CPLGetConfigOption("BOTO_CONFIG", "");
  const std::string gcloud = CPLGetConfigOption("CLOUDSDK_CONFIG", "");
  if (exists(boto) || (!home.empty() && exists(home + "/.boto")) ||
      (!gcloud.empty() && exists(gcloud + "/application_default_credentials.json")) ||
      (!home.empty() && exists(home + "/.config/gcloud/application_default_credentials.json"))) {
    return false;
  }
  return !CPLTestBool(CPLGetConfigOption("CPL_GCE_SKIP", "NO")) &&
         CPLIsMachinePotentiallyGCEInstance();
}

// "Authorization: Bearer <token>" from the machine's metadata server, as GDAL asks it
// (CPL_GCE_CREDENTIALS_URL), or "" when it gave none.
std::string metadata_server_authorization() {
  const CPLStringList token(GOA2GetAccessTokenFromCloudEngineVM(nullptr));
  const char* access_token = token.FetchNameValue("access_token");
  return access_token != nullptr && access_token[0] != '\0'
             ? std::string("Authorization: Bearer ") + access_token
             : std::string();
}

bool finished(const HttpAnswer& answer) {
  return answer.status == 200 || answer.status == 201;
}

// The scheme and authority of a URL ("https://host:port"), or "" when it has none.
std::string origin_of(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) {
    return std::string();
  }
  return CPLString(url.substr(0, url.find('/', scheme + 3))).tolower();
}

}  // namespace

std::optional<GcsCredentials> gcs_signing_credentials(const std::string& path) {
  const auto option = [&path](const char* name, const char* fallback) {
    return std::string(VSIGetPathSpecificOption(path.c_str(), name, fallback));
  };
  if (!option("GS_USER_PROJECT", "").empty() || user_http_headers_set(path)) {
    return std::nullopt;
  }
  GcsCredentials credentials;
  credentials.endpoint = option("CPL_GS_ENDPOINT", "https://storage.googleapis.com/");
  if (credentials.endpoint.empty() || credentials.endpoint.back() != '/') {
    credentials.endpoint += '/';
  }
  if (CPLTestBool(option("GS_NO_SIGN_REQUEST", "NO").c_str())) {
    return credentials;
  }
  credentials.secret = option("GS_SECRET_ACCESS_KEY", "");
  credentials.access_key_id = option("GS_ACCESS_KEY_ID", "");
  if (!credentials.secret.empty()) {
    if (credentials.access_key_id.empty()) {
      return std::nullopt;
    }
    return credentials;
  }
  credentials.access_key_id.clear();
  if (gcs_metadata_server_is_gdals(path)) {
    credentials.metadata_server = true;
    return credentials;
  }
  return std::nullopt;
}

int64_t gcs_chunk_size() {
  return upload_size_option("IDEM_GCS_CHUNK_SIZE", "100", 5120, "a chunk");
}

std::string gcs_string_to_sign(const std::string& verb, const std::string& content_md5,
                               const std::string& content_type, const std::string& date,
                               const std::string& canonical_headers,
                               const std::string& canonical_resource) {
  return verb + "\n" + content_md5 + "\n" + content_type + "\n" + date + "\n" + canonical_headers +
         canonical_resource;
}

HttpAnswer gcs_resumable_upload(const GcsCredentials& credentials, const std::string& vsigs_path,
                                const std::string& local, int64_t size, int64_t chunk_size,
                                const std::string& generation,
                                const std::function<void(const unsigned char*, size_t)>& sink) {
  if (vsigs_path.rfind(k_prefix, 0) != 0 || chunk_size <= 0) {
    throw Error(ErrorKind::k_internal, "not a GCS object: " + vsigs_path);
  }
  const std::string name = vsigs_path.substr(std::strlen(k_prefix));
  // The session: the object's name, type and condition are given here, the bytes to its URI.
  const std::string content_type = "application/octet-stream";
  std::string bearer;
  if (credentials.metadata_server) {
    bearer = metadata_server_authorization();
    if (bearer.empty()) {
      return HttpAnswer{0, "", "the machine's metadata server gave no access token", {}};
    }
  }
  HttpBody no_body;
  HttpAnswer answer = http_send(
      "POST", credentials.endpoint + encode_url_path(name),
      signed_headers(credentials, bearer, "POST", content_type, name,
                     {{"x-goog-if-generation-match", generation}, {"x-goog-resumable", "start"}}),
      no_body, 0);
  const std::string session = answer.header("Location");
  if (!finished(answer) || session.empty()) {
    if (answer.error.empty()) {
      answer.error = "HTTP " + std::to_string(answer.status) + " without a session to upload to";
    }
    return answer;
  }
  // The bytes go only where the request went: a session at another origin (another host, or
  // http where the endpoint is https) is not followed.
  if (origin_of(session) != origin_of(credentials.endpoint)) {
    return HttpAnswer{0,
                      "",
                      "the store named a session at " + origin_of(session) +
                          ", not at the endpoint " + origin_of(credentials.endpoint) +
                          " (CPL_GS_ENDPOINT); nothing was sent there",
                      {}};
  }
  VSILFILE* in = VSIFOpenL(local.c_str(), "rb");
  if (in == nullptr) {
    return HttpAnswer{0, "", "cannot read " + local, {}};
  }
  std::vector<unsigned char> chunk(static_cast<size_t>(std::min(chunk_size, size)));
  const std::string total = std::to_string(size);
  int64_t start = 0;  // `chunk` holds the bytes from `start`, `got` of them
  int64_t got = 0;
  int64_t kept = 0;    // the bytes GCS said it kept
  int64_t handed = 0;  // the bytes given to `sink`
  int stalls = 0;      // chunks in a row of which GCS kept nothing
  answer = HttpAnswer{308, "", "", {}};
  while (answer.status == 308) {
    // GCS keeps a prefix of what it was sent (a multiple of 256 KiB, or all): the next chunk
    // starts where it ends.
    if (kept < handed || kept > start + got) {
      answer = HttpAnswer{0, "", "GCS reported a range of the upload it was not sent", {}};
      break;
    }
    sink(chunk.data() + (handed - start), static_cast<size_t>(kept - handed));
    handed = kept;
    start = kept;
    got = std::min<int64_t>(static_cast<int64_t>(chunk.size()), size - start);
    if (VSIFSeekL(in, static_cast<vsi_l_offset>(start), SEEK_SET) != 0 ||
        static_cast<int64_t>(VSIFReadL(chunk.data(), 1, static_cast<size_t>(got), in)) != got) {
      answer = HttpAnswer{0, "", "reading " + local + " failed", {}};
      break;
    }
    const std::string range =
        got == 0 ? "*" : std::to_string(start) + "-" + std::to_string(start + got - 1);
    HttpBody body;
    body.memory = chunk.data();
    body.memory_size = static_cast<size_t>(got);
    answer =
        http_send_once("PUT", session, {"Content-Range: bytes " + range + "/" + total}, body, got);
    // After a failure that may pass, GCS is asked what it kept, until it answers.
    double delay = http_retry_delay();
    for (int failures = 0; http_transient(answer) && failures < http_max_retries(); ++failures) {
      CPLDebug("IDEM", "GCS upload to %s: %s; asking what it kept in %.1f s", vsigs_path.c_str(),
               answer.error.c_str(), delay);
      CPLSleep(delay);
      delay *= 2;
      HttpBody status_body;
      answer = http_send_once("PUT", session, {"Content-Range: bytes */" + total}, status_body, 0);
    }
    if (answer.status == 308) {
      // A store that keeps nothing of a chunk, again and again, would make this loop forever.
      const int64_t now_kept = kept_bytes(answer);
      stalls = now_kept > kept ? 0 : stalls + 1;
      kept = now_kept;
      if (stalls > http_max_retries() + 1) {
        answer = HttpAnswer{0, "", "GCS kept none of the last chunks sent", {}};
      }
    }
  }
  VSIFCloseL(in);
  if (finished(answer)) {
    if (start + got != size) {  // the object is whole only once its last chunk was sent
      return HttpAnswer{0, "", "GCS ended the upload before its last chunk", {}};
    }
    sink(chunk.data() + (handed - start), static_cast<size_t>(size - handed));
    return answer;
  }
  // Refused (412) or failed: nothing replaced the object; the session is ended for good.
  HttpBody cancel_body;
  http_send_once("DELETE", session, {}, cancel_body, 0);
  return answer;
}

}  // namespace idem
