// SPDX-License-Identifier: MIT
// Source identity by content: content digests of files, object-store headers, and the cache.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/digest_cache.hpp"
#include "store/object_store.hpp"

namespace idem {

enum class SourceDigestPolicy { k_auto, k_content, k_etag };

// Parse IDEM_SOURCE_DIGEST (AUTO|CONTENT|ETAG, any case); throws idem::Error(k_usage) otherwise.
SourceDigestPolicy parse_source_digest_policy(const std::string& value);

// IDEM_SOURCE_DIGEST from the GDAL configuration (AUTO when unset).
SourceDigestPolicy source_digest_policy_from_config();

// The identity of a local file (stat); throws idem::Error(k_source) naming the file.
FileIdentity local_file_identity(const std::string& path);

// The method name of content digests in keys: SHA-256 over the SHA-256 of each 1 MiB piece of
// the bytes (docs/keys.md, "Source identity"), so that several cores can hash one file.
constexpr const char* k_content_digest_method = "sha256_tree";

// Lowercase hex content digest of a file's bytes. Local files are read (pread) and hashed by up
// to one thread per core, a piece at a time; /vsi paths are streamed through VSIFReadL, 4 MiB at
// a time. Throws idem::Error(k_source) naming the file.
std::string content_digest_of_file(const std::string& path);

// content_digest_of_file for a local file, through `cache` (may be null) keyed by its
// FileIdentity. A file that changes while it is hashed is refused (idem::Error(k_source)): its
// digest would be of no one version. The cache holds "sha256_tree:<hex>"; any other value is a
// miss. `read_as` (if given) gets the identity of the file the digest is of.
std::string digest_local_file(const std::string& path, DigestCache* cache,
                              FileIdentity* read_as = nullptr);

// How a source file is identified in the key.
struct SourceDigest {
  std::string method;  // k_content_digest_method, "x-amz-checksum-sha256" or "etag"
  std::string value;
  int64_t size = -1;  // bytes; part of the identity for header-based methods
  // A local file: the identity (device, inode, size, times) of the file the digest is of, for
  // invariant I3's check that the work read that file (work/source_watch.hpp).
  std::optional<FileIdentity> read_as;
};

// Identify one source file under `policy`:
//  - local files and other /vsi paths (vsimem, vsizip...): the content digest (cached for
//    local files);
//  - object stores: CONTENT reads the object (cached by URI + ETag + size); ETAG uses the
//    x-amz-checksum-sha256 header where present, else the ETag, and fails without either;
//    AUTO uses the headers when present, else the content.
// Throws idem::Error(k_source) naming the file when it cannot be read or identified.
SourceDigest digest_source_file(const std::string& path, SourceDigestPolicy policy,
                                DigestCache* cache);

}  // namespace idem
