// SPDX-License-Identifier: MIT
// The cache of source content digests: its interface (the ledger holds the persistent one) and
// the in-process caches (key/source_digest.hpp computes what it caches).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace idem {

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
  // A path and the identity its digest must have been recorded with.
  using Entry = std::pair<std::string, FileIdentity>;
  // The digests recorded for these entries (each path with exactly its identity), by path
  // (absent ones are left out; a path is asked once). A ledger on a server answers in one round
  // trip; the default asks one by one.
  virtual std::map<std::string, std::string> get_many(const std::vector<Entry>& entries);
  // A hint that get_many will soon ask for (some of) these paths: a ledger on a server sends
  // the query now and collects the answer when get_many comes, so the round trip overlaps the
  // caller's work in between (opening the sources). Ignored by local caches.
  virtual void read_ahead(const std::vector<std::string>& /*paths*/) {}
};

// What `backing` held for `asked`, read ahead at once (DigestCache::get_many): the get() of an
// entry found then is answered without asking again; anything else (a miss, which the caller
// follows with hashing, and which the PostgreSQL ledger takes as its cue to load PostGIS
// meanwhile) and every put go to `backing`. A describe reads the digests of its sources with
// its CRS memo answers this way: one round trip to a PostgreSQL ledger instead of two.
class PrefetchedDigestCache : public DigestCache {
 public:
  PrefetchedDigestCache(DigestCache& backing, const std::vector<Entry>& asked,
                        std::map<std::string, std::string> found);
  std::optional<std::string> get(const std::string& path, const FileIdentity& identity) override;
  void put(const std::string& path, const FileIdentity& identity,
           const std::string& digest) override;
  std::map<std::string, std::string> get_many(const std::vector<Entry>& entries) override;

 private:
  DigestCache& m_backing;
  std::map<std::string, std::pair<FileIdentity, std::string>> m_found;  // path -> as asked
};

// The in-process cache: a map guarded by a mutex. Local files are keyed by their identity alone
// (another spelling of the path to the same inode hits); entries without an inode (object-store
// keys, see digest_source_file) are keyed by path and identity.
class InMemoryDigestCache : public DigestCache {
 public:
  std::optional<std::string> get(const std::string& path, const FileIdentity& identity) override;
  void put(const std::string& path, const FileIdentity& identity,
           const std::string& digest) override;
  std::size_t size() const;

 private:
  using Key = std::tuple<std::string, uint64_t, uint64_t, int64_t, int64_t, int64_t>;
  static Key make_key(const std::string& path, const FileIdentity& identity);
  mutable std::mutex m_mutex;
  std::map<Key, std::string> m_digests;
};

}  // namespace idem
