// SPDX-License-Identifier: MIT
// Conditional Put Blob and Delete Blob on Azure, signed with the shared key (azure_blob.hpp).
// Follows Azure's REST reference: "Put Blob", "Delete Blob", "Authorize with Shared Key" and
// "Specifying conditional headers for Blob service operations".
#include "store/azure_blob.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "base/error.hpp"
#include "base/random_token.hpp"
#include "cpl_conv.h"
#include "cpl_string.h"
#include "cpl_vsi.h"
#include "store/http_request.hpp"
#include "store/vsi_file.hpp"

namespace idem {

namespace {

constexpr const char* k_api_version = "2020-10-02";  // Put Blob up to 5000 MiB from 2019-12-12

std::string connection_string_value(const std::string& connection, const std::string& name) {
  const CPLStringList fields(CSLTokenizeString2(connection.c_str(), ";", 0));
  for (int i = 0; i < fields.size(); ++i) {
    const std::string field = fields[i];
    const size_t equals = field.find('=');
    if (equals != std::string::npos && EQUAL(field.substr(0, equals).c_str(), name.c_str())) {
      return field.substr(equals + 1);  // a key ends with '=': split at the first one only
    }
  }
  return std::string();
}

std::optional<std::string> decode_key(const std::string& encoded) {
  std::vector<GByte> buffer(encoded.begin(), encoded.end());
  buffer.push_back(0);
  const int size = CPLBase64DecodeInPlace(buffer.data());
  if (size <= 0) {
    return std::nullopt;
  }
  return std::string(reinterpret_cast<const char*>(buffer.data()), static_cast<size_t>(size));
}

// The request's URL and the part of its path the signature names.
struct Target {
  std::string url;
  std::string canonical_resource;
};

// `query` holds the request's parameters (name, value), sorted by name, unencoded: the URL
// carries them encoded, the signed resource lists them one per line (Shared Key, 2009-09-19+).
Target target_of(const AzureAccount& account, const std::string& vsiaz_path,
                 const std::vector<std::pair<std::string, std::string>>& query = {}) {
  const std::string name = azure_blob_name(vsiaz_path);
  if (name.empty()) {
    throw Error(ErrorKind::k_internal, "not an Azure blob: " + vsiaz_path);
  }
  const std::string object_path = encode_url_path(name);
  const std::string url = account.endpoint + "/" + object_path;
  // The URL's path (after scheme and host) signed under the account's name: for an emulator's
  // endpoint, which holds the account in its path, the name appears twice, as Azure documents.
  const size_t scheme = url.find("://");
  const size_t path_start = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  Target target{url, "/" + account.name + url.substr(path_start)};
  for (size_t i = 0; i < query.size(); ++i) {
    target.url += (i == 0 ? "?" : "&") + query[i].first + "=" + encode_url_path(query[i].second);
    target.canonical_resource += "\n" + query[i].first + ":" + query[i].second;
  }
  return target;
}

// One request to the Blob service: its x-ms- headers in one map (x-ms-date and x-ms-version
// are added), from which both the headers sent and the string signed are made, so that the two
// never disagree (as the GCS requests are built, gcs_upload.cpp's signed_headers).
struct AzureRequest {
  std::string verb;
  Target target;
  std::map<std::string, std::string> ms_headers;  // x-ms-* (lower case) -> value
  std::string content_type;                       // "" sends none (curl's default is removed)
  int64_t content_length = 0;
  std::pair<std::string, std::string> condition;  // If-Match or If-None-Match, and its value
};

std::string sign(const AzureAccount& account, const std::string& string_to_sign);

// The headers of `request` as sent, the last one its Authorization.
std::vector<std::string> signed_headers(const AzureAccount& account, AzureRequest request) {
  request.ms_headers["x-ms-date"] = http_date();
  request.ms_headers["x-ms-version"] = k_api_version;
  std::string canonical_headers;
  std::vector<std::string> headers;
  for (const auto& [name, value] : request.ms_headers) {
    canonical_headers += name + ":" + value + "\n";
    headers.push_back(name + ": " + value);
  }
  const auto& [condition_name, condition_value] = request.condition;
  const bool if_match = EQUAL(condition_name.c_str(), "If-Match");
  const bool if_none_match = EQUAL(condition_name.c_str(), "If-None-Match");
  headers.push_back("Content-Type:" +
                    (request.content_type.empty() ? std::string() : " " + request.content_type));
  if (!condition_name.empty()) {
    headers.push_back(condition_name + ": " + condition_value);
  }
  const std::string to_sign = azure_string_to_sign(
      request.verb, request.content_length, request.content_type, if_match ? condition_value : "",
      if_none_match ? condition_value : "", canonical_headers, request.target.canonical_resource);
  headers.push_back("Authorization: " + sign(account, to_sign));
  return headers;
}

std::string sign(const AzureAccount& account, const std::string& string_to_sign) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_size = 0;
  HMAC(EVP_sha256(), account.key.data(), static_cast<int>(account.key.size()),
       reinterpret_cast<const unsigned char*>(string_to_sign.data()), string_to_sign.size(), mac,
       &mac_size);
  return "SharedKey " + account.name + ":" + base64_of(mac, mac_size);
}

}  // namespace

std::string azure_blob_name(const std::string& path) {
  for (const char* prefix : {"/vsiaz/", "/vsiadls/"}) {
    const size_t length = std::strlen(prefix);
    if (path.compare(0, length, prefix) == 0 && path.size() > length) {
      return path.substr(length);
    }
  }
  return std::string();
}

std::optional<AzureAccount> azure_shared_key_account(const std::string& path) {
  // As GDAL reads them for that path: its path-specific options (VSISetPathSpecificOption, a
  // configuration file's [credentials]) first, then the configuration options.
  const auto option = [&path](const char* name) {
    return std::string(path.empty() ? CPLGetConfigOption(name, "")
                                    : VSIGetPathSpecificOption(path.c_str(), name, ""));
  };
  if (user_http_headers_set(path)) {
    return std::nullopt;  // headers of the user's that IDEM's requests would drop
  }
  AzureAccount account;
  std::string encoded_key;
  const std::string connection = option("AZURE_STORAGE_CONNECTION_STRING");
  if (!connection.empty()) {
    account.name = connection_string_value(connection, "AccountName");
    encoded_key = connection_string_value(connection, "AccountKey");
    account.endpoint = connection_string_value(connection, "BlobEndpoint");
    if (account.endpoint.empty() && !account.name.empty()) {
      std::string protocol = connection_string_value(connection, "DefaultEndpointsProtocol");
      std::string suffix = connection_string_value(connection, "EndpointSuffix");
      account.endpoint = (protocol.empty() ? "https" : protocol) + "://" + account.name + ".blob." +
                         (suffix.empty() ? "core.windows.net" : suffix);
    }
  } else {
    account.name = option("AZURE_STORAGE_ACCOUNT");
    encoded_key = option("AZURE_STORAGE_ACCESS_KEY");
    account.endpoint = "https://" + account.name + ".blob.core.windows.net";
  }
  while (!account.endpoint.empty() && account.endpoint.back() == '/') {
    account.endpoint.pop_back();
  }
  const std::optional<std::string> key = decode_key(encoded_key);
  if (account.name.empty() || !key || account.endpoint.empty()) {
    return std::nullopt;
  }
  account.key = *key;
  return account;
}

std::string azure_string_to_sign(const std::string& verb, int64_t content_length,
                                 const std::string& content_type, const std::string& if_match,
                                 const std::string& if_none_match,
                                 const std::string& canonical_headers,
                                 const std::string& canonical_resource) {
  // VERB, Content-Encoding, Content-Language, Content-Length ("" for 0), Content-MD5,
  // Content-Type, Date (empty: x-ms-date is sent), If-Modified-Since, If-Match, If-None-Match,
  // If-Unmodified-Since, Range, then the x-ms- headers and the resource.
  return verb + "\n\n\n" + (content_length > 0 ? std::to_string(content_length) : "") + "\n\n" +
         content_type + "\n\n\n" + if_match + "\n" + if_none_match + "\n\n\n" + canonical_headers +
         canonical_resource;
}

AzureAnswer azure_put_blob(const AzureAccount& account, const std::string& vsiaz_path,
                           const std::string& local, int64_t size,
                           const std::string& condition_name, const std::string& condition_value,
                           const std::function<void(const unsigned char*, size_t)>& sink) {
  AzureRequest request{"PUT",
                       target_of(account, vsiaz_path),
                       {{"x-ms-blob-type", "BlockBlob"}},
                       "application/octet-stream",
                       size,
                       {condition_name, condition_value}};
  const std::vector<std::string> headers = signed_headers(account, request);
  const VsiFile file(VSIFOpenL(local.c_str(), "rb"));
  if (!file) {
    return AzureAnswer{0, "", "cannot read " + local, {}};
  }
  HttpBody exchange;
  exchange.file = file.get();
  exchange.sink = &sink;
  // A retry sends the bytes again from the start; the sink hears (nullptr, 0) first.
  const auto rewind = [&] {
    if (VSIFSeekL(exchange.file, 0, SEEK_SET) != 0) {
      return false;
    }
    sink(nullptr, 0);
    return true;
  };
  return http_send("PUT", request.target.url, headers, exchange, size, rewind);
}

int64_t azure_block_size() {
  return upload_size_option("IDEM_AZURE_BLOCK_SIZE", "100", 4000, "a block");
}

AzureAnswer azure_put_block_list(const AzureAccount& account, const std::string& vsiaz_path,
                                 const std::string& local, int64_t block_size,
                                 const std::string& condition_name,
                                 const std::string& condition_value,
                                 const std::function<void(const unsigned char*, size_t)>& sink,
                                 const std::function<std::string()>& content_md5) {
  const VsiFile file(VSIFOpenL(local.c_str(), "rb"));
  if (!file) {
    return AzureAnswer{0, "", "cannot read " + local, {}};
  }
  VSILFILE* in = file.get();
  // Block IDs name this upload (a random part) so that another writer's uncommitted blocks of
  // the same blob, which Azure keeps beside these, can never be committed by this list, nor
  // these by its list. Every ID has the same length, as Azure requires; 27 bytes encode without
  // padding.
  const std::string nonce = random_hex(15);
  std::string list = "<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>";
  std::vector<unsigned char> block(static_cast<size_t>(block_size));
  AzureAnswer answer{201, "", "", {}};
  for (int index = 0;; ++index) {
    const size_t got = VSIFReadL(block.data(), 1, block.size(), in);
    if (got < block.size() && VSIFEofL(in) == 0) {
      answer = AzureAnswer{0, "", "reading " + local + " failed", {}};
      break;
    }
    if (got == 0 && index > 0) {
      break;  // the file's size is a multiple of the block's
    }
    char id_text[48];
    std::snprintf(id_text, sizeof id_text, "idem%s%08d", nonce.c_str(), index);
    const std::string id = base64_of(reinterpret_cast<const unsigned char*>(id_text), 27);
    AzureRequest request{"PUT",
                         target_of(account, vsiaz_path, {{"blockid", id}, {"comp", "block"}}),
                         {},
                         "",
                         static_cast<int64_t>(got),
                         {}};
    const std::vector<std::string> headers = signed_headers(account, request);
    HttpBody exchange;
    exchange.memory = block.data();
    exchange.memory_size = got;
    answer =
        http_send("PUT", request.target.url, headers, exchange, static_cast<int64_t>(got), [&] {
          exchange.memory_sent = 0;
          return true;
        });
    if (answer.status != 201) {
      break;
    }
    sink(block.data(), got);  // once the block is stored: a retry never resends hashed bytes
    list += "<Latest>" + id + "</Latest>";
    if (got < block.size()) {
      break;
    }
  }
  if (answer.status != 201) {
    return answer;
  }
  list += "</BlockList>";
  // The list names the blocks to commit; the condition decides whether the commit replaces the
  // blob. The blob gets the Content-MD5 a Put Blob would have given it.
  AzureRequest request{"PUT",
                       target_of(account, vsiaz_path, {{"comp", "blocklist"}}),
                       {{"x-ms-blob-content-md5", content_md5()},
                        {"x-ms-blob-content-type", "application/octet-stream"}},
                       "application/xml",
                       static_cast<int64_t>(list.size()),
                       {condition_name, condition_value}};
  const std::vector<std::string> headers = signed_headers(account, request);
  HttpBody exchange;
  exchange.memory = reinterpret_cast<const unsigned char*>(list.data());
  exchange.memory_size = list.size();
  return http_send("PUT", request.target.url, headers, exchange, static_cast<int64_t>(list.size()),
                   [&] {
                     exchange.memory_sent = 0;
                     return true;
                   });
}

AzureAnswer azure_delete_blob(const AzureAccount& account, const std::string& vsiaz_path,
                              const std::string& etag) {
  AzureRequest request{"DELETE", target_of(account, vsiaz_path), {}, "", 0, {"If-Match", etag}};
  const std::vector<std::string> headers = signed_headers(account, request);
  HttpBody exchange;
  return http_send("DELETE", request.target.url, headers, exchange, 0);
}

}  // namespace idem
