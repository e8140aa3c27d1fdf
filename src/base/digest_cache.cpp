// SPDX-License-Identifier: MIT
// The cache of source content digests (digest_cache.hpp).
#include "base/digest_cache.hpp"

namespace idem {

bool FileIdentity::operator==(const FileIdentity& other) const {
  return device == other.device && inode == other.inode && size == other.size &&
         mtime_ns == other.mtime_ns && ctime_ns == other.ctime_ns;
}

InMemoryDigestCache::Key InMemoryDigestCache::make_key(const std::string& path,
                                                       const FileIdentity& identity) {
  // With an inode the identity names the file; without one the path must.
  const bool has_inode = identity.device != 0 || identity.inode != 0;
  return Key(has_inode ? std::string() : path, identity.device, identity.inode, identity.size,
             identity.mtime_ns, identity.ctime_ns);
}

std::map<std::string, std::string> DigestCache::get_many(const std::vector<Entry>& entries) {
  std::map<std::string, std::string> found;
  for (const auto& [path, identity] : entries) {
    if (found.count(path) == 0) {
      if (auto digest = get(path, identity)) {
        found.emplace(path, std::move(*digest));
      }
    }
  }
  return found;
}

PrefetchedDigestCache::PrefetchedDigestCache(DigestCache& backing, const std::vector<Entry>& asked,
                                             std::map<std::string, std::string> found)
    : m_backing(backing) {
  for (const auto& [path, identity] : asked) {
    auto digest = found.find(path);
    if (digest != found.end()) {
      m_found.emplace(path, std::make_pair(identity, std::move(digest->second)));
    }
  }
}

std::optional<std::string> PrefetchedDigestCache::get(const std::string& path,
                                                      const FileIdentity& identity) {
  const auto found = m_found.find(path);
  if (found != m_found.end() && found->second.first == identity) {
    return found->second.second;
  }
  return m_backing.get(path, identity);  // a miss then, not asked, or the file changed since
}

void PrefetchedDigestCache::put(const std::string& path, const FileIdentity& identity,
                                const std::string& digest) {
  m_backing.put(path, identity, digest);
}

std::map<std::string, std::string> PrefetchedDigestCache::get_many(
    const std::vector<Entry>& entries) {
  return m_backing.get_many(entries);
}

std::optional<std::string> InMemoryDigestCache::get(const std::string& path,
                                                    const FileIdentity& identity) {
  std::lock_guard<std::mutex> lock(m_mutex);
  const auto it = m_digests.find(make_key(path, identity));
  if (it == m_digests.end()) {
    return std::nullopt;
  }
  return it->second;
}

void InMemoryDigestCache::put(const std::string& path, const FileIdentity& identity,
                              const std::string& digest) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_digests[make_key(path, identity)] = digest;
}

std::size_t InMemoryDigestCache::size() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_digests.size();
}

}  // namespace idem
