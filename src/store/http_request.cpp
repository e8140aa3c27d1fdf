// SPDX-License-Identifier: MIT
// IDEM's own HTTP requests to object stores, through libcurl (http_request.hpp).
#include "store/http_request.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>

#include "base/error.hpp"
#include "cpl_conv.h"
#include "cpl_error.h"
#include "cpl_minixml.h"
#include "cpl_multiproc.h"
#include "cpl_string.h"

namespace idem {

namespace {

// What a request's answer said, gathered by libcurl's callbacks.
struct Received {
  HttpBody* body = nullptr;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string text;
};

size_t read_body(char* buffer, size_t size, size_t count, void* user) {
  HttpBody* body = static_cast<Received*>(user)->body;
  if (body->file == nullptr) {
    const size_t got = std::min(size * count, body->memory_size - body->memory_sent);
    std::copy_n(body->memory + body->memory_sent, got, buffer);
    body->memory_sent += got;
    return got;
  }
  const size_t got = VSIFReadL(buffer, 1, size * count, body->file);
  if (got < size * count && VSIFEofL(body->file) == 0) {
    body->read_failed = true;
    return CURL_READFUNC_ABORT;
  }
  if (got > 0 && body->sink != nullptr) {
    (*body->sink)(reinterpret_cast<const unsigned char*>(buffer), got);
  }
  return got;
}

size_t keep_header(char* buffer, size_t size, size_t count, void* user) {
  auto* received = static_cast<Received*>(user);
  const std::string line(buffer, size * count);
  if (line.rfind("HTTP/", 0) == 0) {
    received->headers.clear();  // a new response (after a 100 Continue, say): its own headers
    return size * count;
  }
  const size_t colon = line.find(':');
  if (colon != std::string::npos) {
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    value.erase(value.find_last_not_of(" \t\r\n") + 1);
    received->headers.emplace_back(line.substr(0, colon), value);
  }
  return size * count;
}

size_t keep_answer(char* buffer, size_t size, size_t count, void* user) {
  auto* received = static_cast<Received*>(user);
  if (received->text.size() < 4096) {
    received->text.append(buffer, std::min<size_t>(size * count, 4096));
  }
  return size * count;
}

// The error an XML answer names (<Error><Code>...</Code>, as Azure and GCS send), after the
// status, read with GDAL's XML parser.
std::string error_of(long status, const std::string& answer) {
  std::string text = "HTTP " + std::to_string(status);
  if (answer.find('<') == std::string::npos) {
    return text;
  }
  CPLErrorStateBackuper keep_error_state;
  CPLErrorHandlerPusher quiet(CPLQuietErrorHandler);
  const CPLXMLTreeCloser tree(CPLParseXMLString(answer.c_str()));
  const char* code = tree ? CPLGetXMLValue(tree.get(), "=Error.Code", nullptr) : nullptr;
  if (code != nullptr && code[0] != '\0') {
    text += std::string(" ") + code;
  }
  return text;
}

struct CurlCloser {
  void operator()(CURL* curl) const { curl_easy_cleanup(curl); }
};
struct SlistCloser {
  void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};

}  // namespace

std::string HttpAnswer::header(const char* name) const {
  for (const auto& [header_name, value] : headers) {
    if (EQUAL(header_name.c_str(), name)) {
      return value;
    }
  }
  return std::string();
}

bool user_http_headers_set(const std::string& path) {
  for (const char* name : {"GDAL_HTTP_HEADERS", "GDAL_HTTP_HEADER_FILE"}) {
    const char* value = path.empty() ? CPLGetConfigOption(name, nullptr)
                                     : VSIGetPathSpecificOption(path.c_str(), name, nullptr);
    if (value != nullptr && value[0] != '\0') {
      return true;
    }
  }
  return false;
}

HttpAnswer http_send_once(const std::string& verb, const std::string& url,
                          const std::vector<std::string>& headers, HttpBody& body, int64_t size) {
  std::unique_ptr<CURL, CurlCloser> curl(curl_easy_init());
  if (!curl) {
    return HttpAnswer{0, "", "cannot start an HTTP request (libcurl)", {}};
  }
  std::unique_ptr<curl_slist, SlistCloser> list;
  for (const std::string& header : headers) {
    list.reset(curl_slist_append(list.release(), header.c_str()));
  }
  list.reset(curl_slist_append(list.release(), "Expect:"));  // no 100-continue round trip
  Received received;
  received.body = &body;
  CURL* handle = curl.get();
  curl_easy_setopt(handle, CURLOPT_URL, url.c_str());
  curl_easy_setopt(handle, CURLOPT_HTTPHEADER, list.get());
  curl_easy_setopt(handle, CURLOPT_HEADERFUNCTION, keep_header);
  curl_easy_setopt(handle, CURLOPT_HEADERDATA, &received);
  curl_easy_setopt(handle, CURLOPT_WRITEFUNCTION, keep_answer);
  curl_easy_setopt(handle, CURLOPT_WRITEDATA, &received);
  curl_easy_setopt(handle, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(handle, CURLOPT_CONNECTTIMEOUT,
                   std::atol(CPLGetConfigOption("GDAL_HTTP_CONNECTTIMEOUT", "30")));
  if (const char* bundle = CPLGetConfigOption("GDAL_CURL_CA_BUNDLE",
                                              CPLGetConfigOption("CURL_CA_BUNDLE", nullptr))) {
    curl_easy_setopt(handle, CURLOPT_CAINFO, bundle);
  }
  if (verb == "PUT" || verb == "POST") {
    curl_easy_setopt(handle, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(handle, CURLOPT_READFUNCTION, read_body);
    curl_easy_setopt(handle, CURLOPT_READDATA, &received);
    curl_easy_setopt(handle, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(size));
  }
  if (verb != "PUT") {
    curl_easy_setopt(handle, CURLOPT_CUSTOMREQUEST, verb.c_str());
  }
  const CURLcode code = curl_easy_perform(handle);
  HttpAnswer answer;
  if (code != CURLE_OK) {
    answer.error = body.read_failed ? "reading the file to upload failed"
                                    : std::string(curl_easy_strerror(code));
    return answer;
  }
  curl_easy_getinfo(handle, CURLINFO_RESPONSE_CODE, &answer.status);
  answer.headers = std::move(received.headers);
  answer.etag = answer.header("ETag");
  if (answer.status >= 300) {
    answer.error = error_of(answer.status, received.text);
  }
  return answer;
}

bool http_transient(const HttpAnswer& answer) {
  return answer.status == 0 || answer.status == 429 || answer.status >= 500;
}

int http_max_retries() {
  return std::max(0, std::atoi(CPLGetConfigOption("GDAL_HTTP_MAX_RETRY", "0")));
}

double http_retry_delay() {
  return std::max(0.0, CPLAtof(CPLGetConfigOption("GDAL_HTTP_RETRY_DELAY", "30")));
}

HttpAnswer retry_transient(HttpAnswer answer, const std::string& what,
                           const std::function<std::optional<HttpAnswer>()>& again) {
  const int retries = http_max_retries();
  double delay = http_retry_delay();
  for (int attempt = 0; attempt < retries && http_transient(answer); ++attempt) {
    CPLDebug("IDEM", "%s: %s; again in %.1f s", what.c_str(), answer.error.c_str(), delay);
    CPLSleep(delay);
    delay *= 2;
    std::optional<HttpAnswer> next = again();
    if (!next) {
      break;
    }
    answer = std::move(*next);
  }
  return answer;
}

HttpAnswer http_send(const std::string& verb, const std::string& url,
                     const std::vector<std::string>& headers, HttpBody& body, int64_t size,
                     const std::function<bool()>& rewind) {
  return retry_transient(http_send_once(verb, url, headers, body, size), verb + " " + url,
                         [&]() -> std::optional<HttpAnswer> {
                           if (body.read_failed || (rewind && !rewind())) {
                             return std::nullopt;
                           }
                           return http_send_once(verb, url, headers, body, size);
                         });
}

int64_t upload_size_option(const char* name, const char* fallback, long long max_mib,
                           const char* what) {
  const char* text = CPLGetConfigOption(name, fallback);
  char* end = nullptr;
  const long long mib = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || mib < 1 || mib > max_mib) {
    throw Error(ErrorKind::k_usage, std::string(name) + "=" + text +
                                        " is not valid: give the size of " + what +
                                        " in MiB, from 1 to " + std::to_string(max_mib) +
                                        " (default " + fallback + ")");
  }
  return static_cast<int64_t>(mib) << 20;
}

std::string encode_url_path(const std::string& path) {
  std::string encoded;
  for (const unsigned char c : path) {
    if (std::isalnum(c) != 0 || c == '-' || c == '.' || c == '_' || c == '~' || c == '/') {
      encoded += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      encoded += hex;
    }
  }
  return encoded;
}

std::string http_date() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[64];
  std::strftime(text, sizeof text, "%a, %d %b %Y %H:%M:%S GMT", &utc);
  return text;
}

std::string base64_of(const unsigned char* data, size_t size) {
  char* encoded = CPLBase64Encode(static_cast<int>(size), data);
  std::string result = encoded;
  CPLFree(encoded);
  return result;
}

}  // namespace idem
