// SPDX-License-Identifier: MIT
// The HTTP requests IDEM sends to an object store itself, where GDAL's writer cannot carry the
// upload's condition (azure_blob.hpp, gcs_upload.hpp): libcurl, with the HTTP options of GDAL's
// that apply (GDAL_HTTP_CONNECTTIMEOUT, GDAL_HTTP_MAX_RETRY, GDAL_HTTP_RETRY_DELAY,
// GDAL_CURL_CA_BUNDLE or CURL_CA_BUNDLE, and libcurl's proxy variables). Signing is the store's.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cpl_vsi.h"

namespace idem {

// What a store answered: the HTTP status (0 when no answer came), the ETag it sent, the error's
// text (the XML answer's <Code>, or what libcurl said) for a status of 300 or more, and the
// answer's headers (of the last response, names as sent).
struct HttpAnswer {
  long status = 0;
  std::string etag;
  std::string error;
  std::vector<std::pair<std::string, std::string>> headers;

  // The value of header `name` (any case), or "".
  std::string header(const char* name) const;
};

// A request's body: read from `file` (any GDAL path, opened by the caller) when it is set, else
// `memory_size` bytes at `memory`. `sink`, when set, sees every byte read from the file, in order.
struct HttpBody {
  VSILFILE* file = nullptr;
  const std::function<void(const unsigned char*, size_t)>* sink = nullptr;
  const unsigned char* memory = nullptr;
  size_t memory_size = 0;
  size_t memory_sent = 0;
  bool read_failed = false;
};

// Whether the user gives GDAL's requests for `path` headers of their own (GDAL_HTTP_HEADERS,
// GDAL_HTTP_HEADER_FILE, as GDAL reads them for the path): an encryption key, a user project,
// an Authorization... IDEM's own requests would not carry them, so it does not send a request
// for that path itself then, and leaves the upload to GDAL's writer (azure_blob.hpp,
// gcs_upload.hpp).
bool user_http_headers_set(const std::string& path);

// One request of `verb` to `url` with `headers` ("Name: value") and `size` bytes of `body` (PUT
// and POST send it, with its Content-Length, even when empty).
HttpAnswer http_send_once(const std::string& verb, const std::string& url,
                          const std::vector<std::string>& headers, HttpBody& body, int64_t size);

// Whether an answer is worth asking again, as GDAL's own HTTP retries do: no answer, too many
// requests, or a server error.
bool http_transient(const HttpAnswer& answer);

// GDAL_HTTP_MAX_RETRY (default 0) and GDAL_HTTP_RETRY_DELAY (seconds, default 30; it doubles
// after each retry).
int http_max_retries();
double http_retry_delay();

// `answer` asked for again after each transient failure (http_transient), as GDAL's own HTTP
// retries do: up to GDAL_HTTP_MAX_RETRY times, GDAL_HTTP_RETRY_DELAY seconds apart (doubling).
// `again` sends the next request after the wait and gives its answer, or nullopt to stop;
// `what` names the request in the debug message. The one retry loop of IDEM's requests.
HttpAnswer retry_transient(HttpAnswer answer, const std::string& what,
                           const std::function<std::optional<HttpAnswer>()>& again);

// One request, sent again after a transient failure up to GDAL_HTTP_MAX_RETRY times,
// GDAL_HTTP_RETRY_DELAY seconds apart (doubling). A conditional request that went through
// although its answer was lost is refused when sent again (409/412): the caller then looks at
// the object, as after any refusal. `rewind` makes the body readable from its start again.
HttpAnswer http_send(const std::string& verb, const std::string& url,
                     const std::vector<std::string>& headers, HttpBody& body, int64_t size,
                     const std::function<bool()>& rewind = nullptr);

// The size in bytes given in MiB by the configuration option `name` (`fallback` when unset),
// a whole number from 1 to `max_mib`: the chunk or block size of an upload IDEM sends itself.
// Throws idem::Error(k_usage) naming the option, its value and what is valid otherwise.
int64_t upload_size_option(const char* name, const char* fallback, long long max_mib,
                           const char* what);

// `path` percent-encoded except for unreserved characters and '/', as a URL's path.
std::string encode_url_path(const std::string& path);

// Now, as an HTTP Date header gives it ("Sun, 06 Dec 2026 16:33:12 GMT").
std::string http_date();

// Base64 (with padding) of `size` bytes at `data`.
std::string base64_of(const unsigned char* data, size_t size);

}  // namespace idem
