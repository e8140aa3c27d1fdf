// SPDX-License-Identifier: MIT
// A conditional resumable upload to GCS (gcs_upload.hpp). Follows GCS's XML API reference:
// "POST Object (resumable)", "Perform resumable uploads", "Request preconditions" and the HMAC
// signature GDAL's /vsigs/ signs its own requests with.
#include "store/gcs_upload.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "base/error.hpp"
#include "cpl_conv.h"
#include "cpl_error.h"
#include "cpl_http.h"
#include "cpl_json.h"
#include "cpl_multiproc.h"
#include "cpl_string.h"
#include "cpl_vsi.h"
#include "store/vsi_file.hpp"

namespace idem {

namespace {

constexpr const char* k_prefix = "/vsigs/";

// The headers of a request to the object `name` ("bucket/key"): with `bearer` (an Authorization
// header) when there is one, else signed when there is a key. `goog` holds its x-goog- headers
// (names in lower case), to which GS_USER_PROJECT's is added.
std::vector<std::string> signed_headers(const GcsCredentials& credentials,
                                        const std::string& bearer, const std::string& verb,
                                        const std::string& content_type, const std::string& name,
                                        std::map<std::string, std::string> goog) {
  const std::string date = http_date();
  std::vector<std::string> headers = {"Date: " + date, "Content-Type: " + content_type};
  if (!credentials.user_project.empty()) {
    goog["x-goog-user-project"] = credentials.user_project;
  }
  std::string canonical;  // sorted by name, as the map holds them
  for (const auto& [header, value] : goog) {
    headers.push_back(header + ": " + value);
    canonical += header + ":" + value + "\n";
  }
  if (!bearer.empty()) {
    headers.push_back(bearer);
  } else if (credentials.kind == GcsCredentials::Kind::k_hmac) {
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

// Whether GDAL would sign with a token from the machine's metadata server, once none of its other
// credentials was found: on (potentially) a Compute Engine machine. A gcloud application default
// credentials file or a BOTO_CONFIG file, which no GDAL release up to 3.13 reads but a later one
// could read first, makes IDEM leave the upload to GDAL rather than risk signing as another
// account.
bool gcs_metadata_server_is_gdals() {
  const std::string home = CPLGetConfigOption("HOME", "");
  const std::string boto = CPLGetConfigOption("BOTO_CONFIG", "");
  const std::string gcloud = CPLGetConfigOption("CLOUDSDK_CONFIG", "");
  if (exists(boto) ||
      (!gcloud.empty() && exists(gcloud + "/application_default_credentials.json")) ||
      (!home.empty() && exists(home + "/.config/gcloud/application_default_credentials.json"))) {
    return false;
  }
  return !CPLTestBool(CPLGetConfigOption("CPL_GCE_SKIP", "NO")) &&
         CPLIsMachinePotentiallyGCEInstance();
}

// A private key as GDAL reads it: "\n" written out in a JSON or configuration value is a new line.
std::string private_key_text(const std::string& key) {
  CPLString text(key);
  text.replaceAll("\\n", "\n").replaceAll("\n\n", "\n").replaceAll("\r", "");
  return std::string(text);
}

constexpr const char* k_default_scope = "https://www.googleapis.com/auth/devstorage.read_write";

// A client's id and secret, both or none (GDAL refuses one without the other): false for one.
bool client_pair(const std::string& id, const std::string& secret) {
  return id.empty() == secret.empty();
}

// The credentials of a JSON file named by GOOGLE_APPLICATION_CREDENTIALS: a service account's
// key or an authorized user's refresh token (gcloud's format), as GDAL reads it.
std::optional<GcsCredentials> json_credentials(GcsCredentials credentials, const std::string& file,
                                               const std::string& scope) {
  CPLJSONDocument document;
  {
    const CPLErrorStateBackuper state;
    const CPLErrorHandlerPusher quiet(CPLQuietErrorHandler);
    if (!document.Load(file)) {
      return std::nullopt;
    }
  }
  const CPLJSONObject root = document.GetRoot();
  const std::string type = root.GetString("type");
  credentials.source = "GOOGLE_APPLICATION_CREDENTIALS (" + type + ")";
  if (type == "service_account") {
    credentials.kind = GcsCredentials::Kind::k_service_account;
    credentials.private_key = private_key_text(root.GetString("private_key"));
    credentials.client_email = root.GetString("client_email");
    credentials.scope = scope;
    if (credentials.private_key.empty() || credentials.client_email.empty()) {
      return std::nullopt;  // GDAL refuses a service account without either
    }
    return credentials;
  }
  if (type == "authorized_user") {
    credentials.kind = GcsCredentials::Kind::k_refresh_token;
    credentials.refresh_token = root.GetString("refresh_token");
    credentials.client_id = root.GetString("client_id");
    credentials.client_secret = root.GetString("client_secret");
    return credentials;
  }
  return std::nullopt;
}

// The credentials of a .boto file as GDAL reads it ([Credentials] gs_access_key_id,
// gs_secret_access_key, gs_oauth2_refresh_token; [OAuth2] client_id, client_secret): a refresh
// token before an HMAC key. nullopt when it holds neither (or cannot be read): GDAL then goes on
// to the metadata server. `refused`: it holds a refresh token with a client's id but not its
// secret (or the reverse), which GDAL refuses without going on.
std::optional<GcsCredentials> boto_credentials(GcsCredentials credentials, const std::string& file,
                                               bool& refused) {
  std::map<std::string, std::string> values;  // "section/key" in lower case -> value
  const VsiFile in(VSIFOpenL(file.c_str(), "rb"));
  if (!in) {
    return std::nullopt;
  }
  std::string section;
  while (const char* line = CPLReadLineL(in.get())) {
    if (line[0] == '[') {
      section = line;
      continue;
    }
    char* raw_key = nullptr;
    const char* value = CPLParseNameValue(line, &raw_key);
    if (raw_key != nullptr && value != nullptr) {
      values[section + "/" + CPLString(raw_key).tolower()] = CPLString(value).Trim();
    }
    CPLFree(raw_key);
  }
  credentials.source = file;
  credentials.refresh_token = values["[Credentials]/gs_oauth2_refresh_token"];
  if (!credentials.refresh_token.empty()) {
    credentials.kind = GcsCredentials::Kind::k_refresh_token;
    // The configuration's client first, else the file's; each both or none.
    credentials.client_id = CPLGetConfigOption("GS_OAUTH2_CLIENT_ID", "");
    credentials.client_secret = CPLGetConfigOption("GS_OAUTH2_CLIENT_SECRET", "");
    if (credentials.client_id.empty() && credentials.client_secret.empty()) {
      credentials.client_id = values["[OAuth2]/client_id"];
      credentials.client_secret = values["[OAuth2]/client_secret"];
    }
    refused = !client_pair(credentials.client_id, credentials.client_secret);
    return refused ? std::nullopt : std::make_optional(credentials);
  }
  credentials.access_key_id = values["[Credentials]/gs_access_key_id"];
  credentials.secret = values["[Credentials]/gs_secret_access_key"];
  if (credentials.access_key_id.empty() || credentials.secret.empty()) {
    return std::nullopt;
  }
  credentials.kind = GcsCredentials::Kind::k_hmac;
  return credentials;
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
  const auto option = [&path](const char* name) {
    return std::string(VSIGetPathSpecificOption(path.c_str(), name, ""));
  };
  if (user_http_headers_set(path)) {
    return std::nullopt;
  }
  GcsCredentials credentials;
  credentials.endpoint = option("CPL_GS_ENDPOINT");
  if (credentials.endpoint.empty()) {
    credentials.endpoint = "https://storage.googleapis.com/";
  }
  if (credentials.endpoint.back() != '/') {
    credentials.endpoint += '/';
  }
  credentials.user_project = option("GS_USER_PROJECT");
  if (CPLTestBool(VSIGetPathSpecificOption(path.c_str(), "GS_NO_SIGN_REQUEST", "NO"))) {
    credentials.source = "GS_NO_SIGN_REQUEST";
    return credentials;
  }
  credentials.secret = option("GS_SECRET_ACCESS_KEY");
  if (!credentials.secret.empty()) {
    credentials.access_key_id = option("GS_ACCESS_KEY_ID");
    if (credentials.access_key_id.empty()) {
      return std::nullopt;
    }
    credentials.kind = GcsCredentials::Kind::k_hmac;
    credentials.source = "GS_SECRET_ACCESS_KEY";
    return credentials;
  }
  credentials.secret.clear();
  credentials.refresh_token = option("GS_OAUTH2_REFRESH_TOKEN");
  if (!credentials.refresh_token.empty()) {
    credentials.kind = GcsCredentials::Kind::k_refresh_token;
    credentials.source = "GS_OAUTH2_REFRESH_TOKEN";
    credentials.client_id = option("GS_OAUTH2_CLIENT_ID");
    credentials.client_secret = option("GS_OAUTH2_CLIENT_SECRET");
    if (!client_pair(credentials.client_id, credentials.client_secret)) {
      return std::nullopt;
    }
    return credentials;
  }
  std::string scope = option("GS_OAUTH2_SCOPE");
  if (scope.empty()) {
    scope = k_default_scope;
  }
  const std::string json_file = option("GOOGLE_APPLICATION_CREDENTIALS");
  if (!json_file.empty()) {
    return json_credentials(credentials, json_file, scope);
  }
  credentials.private_key = option("GS_OAUTH2_PRIVATE_KEY");
  const std::string key_file = option("GS_OAUTH2_PRIVATE_KEY_FILE");
  if (!credentials.private_key.empty() || !key_file.empty()) {
    credentials.source = "GS_OAUTH2_PRIVATE_KEY";
    if (!key_file.empty()) {
      credentials.source = "GS_OAUTH2_PRIVATE_KEY_FILE";
      const VsiFile in(VSIFOpenL(key_file.c_str(), "rb"));
      if (!in) {
        return std::nullopt;
      }
      std::vector<char> text(32768);  // what GDAL reads of it
      text.resize(VSIFReadL(text.data(), 1, text.size(), in.get()));
      credentials.private_key.assign(text.begin(), text.end());
    }
    credentials.private_key = private_key_text(credentials.private_key);
    credentials.client_email = option("GS_OAUTH2_CLIENT_EMAIL");
    if (credentials.client_email.empty() || credentials.private_key.empty()) {
      return std::nullopt;
    }
    credentials.kind = GcsCredentials::Kind::k_service_account;
    credentials.scope = scope;
    return credentials;
  }
  credentials.private_key.clear();
  const char* home = CPLGetConfigOption("HOME", nullptr);
  const std::string boto = CPLGetConfigOption(
      "CPL_GS_CREDENTIALS_FILE", (std::string(home != nullptr ? home : "") + "/.boto").c_str());
  if (exists(boto)) {
    bool refused = false;
    if (auto from_file = boto_credentials(credentials, boto, refused); from_file || refused) {
      return from_file;
    }
  }
  if (gcs_metadata_server_is_gdals()) {
    credentials.kind = GcsCredentials::Kind::k_metadata_server;
    credentials.source = "the machine's metadata server";
    return credentials;
  }
  return std::nullopt;
}

std::string gcs_bearer_authorization(const GcsCredentials& credentials) {
  std::string token;
  std::string failure;
  {
    // GDAL's messages stay quiet here; the error below says what failed.
    const CPLErrorStateBackuper state;
    const CPLErrorHandlerPusher quiet(CPLQuietErrorHandler);
    CPLErrorReset();
    switch (credentials.kind) {
      case GcsCredentials::Kind::k_unsigned:
      case GcsCredentials::Kind::k_hmac:
        return std::string();
      case GcsCredentials::Kind::k_refresh_token: {
        // GOA2GetAccessToken takes the client from GOA2_CLIENT_ID and GOA2_CLIENT_SECRET (else
        // GDAL's own), set here for this thread as GDAL passes its client itself.
        std::optional<CPLConfigOptionSetter> id;
        std::optional<CPLConfigOptionSetter> secret;
        if (!credentials.client_id.empty()) {
          id.emplace("GOA2_CLIENT_ID", credentials.client_id.c_str(), false);
          secret.emplace("GOA2_CLIENT_SECRET", credentials.client_secret.c_str(), false);
        }
        char* got = GOA2GetAccessToken(credentials.refresh_token.c_str(), k_default_scope);
        token = got != nullptr ? got : "";
        CPLFree(got);
        break;
      }
      case GcsCredentials::Kind::k_service_account: {
        const CPLStringList got(GOA2GetAccessTokenFromServiceAccount(
            credentials.private_key.c_str(), credentials.client_email.c_str(),
            credentials.scope.c_str(), nullptr, nullptr));
        token = got.FetchNameValueDef("access_token", "");
        break;
      }
      case GcsCredentials::Kind::k_metadata_server: {
        const CPLStringList got(GOA2GetAccessTokenFromCloudEngineVM(nullptr));
        token = got.FetchNameValueDef("access_token", "");
        break;
      }
    }
    failure = CPLGetLastErrorMsg();
  }
  if (token.empty()) {
    throw Error(ErrorKind::k_io,
                "no OAuth2 access token for the GCS upload (credentials: " + credentials.source +
                    ")" + (failure.empty() ? std::string() : ": " + failure));
  }
  return "Authorization: Bearer " + token;
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
  try {
    bearer = gcs_bearer_authorization(credentials);
  } catch (const Error& error) {
    return HttpAnswer{0, "", error.what(), {}};
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
  const VsiFile file(VSIFOpenL(local.c_str(), "rb"));
  if (!file) {
    return HttpAnswer{0, "", "cannot read " + local, {}};
  }
  VSILFILE* in = file.get();
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
    answer =
        retry_transient(std::move(answer), "GCS upload to " + vsigs_path + " (asking what it kept)",
                        [&]() -> std::optional<HttpAnswer> {
                          HttpBody status_body;
                          return http_send_once("PUT", session, {"Content-Range: bytes */" + total},
                                                status_body, 0);
                        });
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
