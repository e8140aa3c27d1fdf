// SPDX-License-Identifier: MIT
// The Azure Blob Storage requests IDEM sends itself (docs/object-storage.md, "Azure"): a
// conditional Put Blob and a conditional Delete Blob, signed with the account's shared key.
//
// GDAL's /vsiaz/ writer cannot carry a condition: on a refused PUT (409) it deletes the blob and
// tries again, which would make a zombie delete newer work, and it sends an object larger than
// VSIAZ_CHUNK_SIZE as an append blob in several requests, visible half-written. So an upload
// that must be conditional goes here instead: one Put Blob request (Azure takes up to 5000 MiB
// in one) with If-None-Match: * or If-Match: <ETag>, which Azure answers 409 or 412 when the
// condition does not hold, replacing nothing; a larger one as blocks committed by one Put Block
// List carrying the condition.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "store/http_request.hpp"

namespace idem {

// The blob a path names on Azure's Blob service ("container/key"), or "" for a path that is not
// on Azure. /vsiaz/container/key, and /vsiadls/filesystem/path: a Data Lake Storage Gen2
// filesystem is a container to the Blob service and its files are blobs (Azure documents the Blob
// API on accounts with a hierarchical namespace), so IDEM writes and deletes them with the same
// conditional requests while GDAL reads them through either prefix. The one place that decides
// which paths IDEM's Azure requests serve.
std::string azure_blob_name(const std::string& path);

// An account IDEM can sign requests for: its name, its key (decoded) and its blob endpoint
// (scheme, host and any path before the container, no trailing slash).
struct AzureAccount {
  std::string name;
  std::string key;
  std::string endpoint;
};

// The account of GDAL's configuration when it is a shared key: AZURE_STORAGE_CONNECTION_STRING
// with AccountName and AccountKey (BlobEndpoint, or DefaultEndpointsProtocol and
// EndpointSuffix), else AZURE_STORAGE_ACCOUNT with AZURE_STORAGE_ACCESS_KEY. nullopt for any
// other credentials (a SAS token, a managed identity, no signing): IDEM cannot sign for them;
// and when the user gives GDAL's requests headers of their own (user_http_headers_set).
// With `path`, each option is read as GDAL reads it for that path (VSIGetPathSpecificOption:
// the options set for a prefix of the path, else the configuration's), so IDEM signs for the
// account GDAL reads the path from.
std::optional<AzureAccount> azure_shared_key_account(const std::string& path = std::string());

// The largest blob one Put Blob request may carry (5000 MiB).
constexpr int64_t k_azure_put_blob_max = int64_t{5000} << 20;

// What Azure answered: the HTTP status (0 when no answer came), the ETag of a written blob, and
// the error's text otherwise.
using AzureAnswer = HttpAnswer;

// Put Blob of the bytes of `local` (any GDAL path) to `vsiaz_path` (/vsiaz/container/key), with
// the header `condition_name: condition_value` (If-None-Match: * or If-Match: <ETag>). `sink`
// sees every byte sent, in order; before a retry sends them again (a transient failure,
// GDAL_HTTP_MAX_RETRY), it is called with (nullptr, 0) to start over.
AzureAnswer azure_put_blob(const AzureAccount& account, const std::string& vsiaz_path,
                           const std::string& local, int64_t size,
                           const std::string& condition_name, const std::string& condition_value,
                           const std::function<void(const unsigned char*, size_t)>& sink);

// The size of the blocks an upload larger than one block is sent in: IDEM_AZURE_BLOCK_SIZE
// (MiB, 1 to 4000, default 100). Throws idem::Error(k_usage) for another value.
int64_t azure_block_size();

// The most blocks one blob may have.
constexpr int64_t k_azure_max_blocks = 50000;

// The bytes of `local` sent as blocks of `block_size` (Put Block, each sent again on a transient
// failure), then committed by one Put Block List carrying the condition, as in azure_put_blob:
// the blob changes only if the condition holds, whole. `sink` sees each block once Azure has
// stored it, in order; `content_md5` then gives the base64 MD5 of all of them, which the blob
// keeps as its Content-MD5 (as after a Put Blob). Blocks of a refused commit stay uncommitted
// (never visible) until Azure discards them, a week later, or the blob's next commit.
AzureAnswer azure_put_block_list(const AzureAccount& account, const std::string& vsiaz_path,
                                 const std::string& local, int64_t block_size,
                                 const std::string& condition_name,
                                 const std::string& condition_value,
                                 const std::function<void(const unsigned char*, size_t)>& sink,
                                 const std::function<std::string()>& content_md5);

// Delete Blob of `vsiaz_path` only if its ETag is `etag` (If-Match): 202 when deleted.
AzureAnswer azure_delete_blob(const AzureAccount& account, const std::string& vsiaz_path,
                              const std::string& etag);

// The string a shared-key request signs (Azure's "Authorize with Shared Key", version
// 2015-02-21 and later), exposed for its unit test.
std::string azure_string_to_sign(const std::string& verb, int64_t content_length,
                                 const std::string& content_type, const std::string& if_match,
                                 const std::string& if_none_match,
                                 const std::string& canonical_headers,
                                 const std::string& canonical_resource);

}  // namespace idem
