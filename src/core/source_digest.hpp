// Source identity by content: streamed SHA-256 of files, object-store headers, and the cache.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace idem {

enum class SourceDigestPolicy { k_auto, k_content, k_etag };

// Parse IDEM_SOURCE_DIGEST (AUTO|CONTENT|ETAG, any case); throws idem::Error(k_usage) otherwise.
SourceDigestPolicy parse_source_digest_policy(const std::string& value);

// What identifies a local file's content without reading it, as git's index does.
struct FileIdentity {
  uint64_t device = 0;
  uint64_t inode = 0;
  int64_t size = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  bool operator==(const FileIdentity& other) const;
};

// Cache of digests. The ledger database provides the persistent one; an in-process one exists
// for runs without a ledger (dry runs of `gdal-idem key`).
class DigestCache {
public:
  virtual ~DigestCache() = default;
  // A digest recorded for `path` with exactly this identity, if any.
  virtual std::optional<std::string> get(const std::string& path, const FileIdentity& identity) = 0;
  virtual void put(const std::string& path, const FileIdentity& identity,
                   const std::string& digest) = 0;
};


}  // namespace idem
