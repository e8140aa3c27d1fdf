// The IDEM driver's _DEBUG_ metadata (debug_report.hpp).
#include "debug_report.hpp"

#include "cpl_string.h"

namespace idem {

namespace {

CPLStringList& report() {
  thread_local CPLStringList items;
  return items;
}

bool is_debug_domain(const char* domain) {
  return domain != nullptr && EQUAL(domain, k_debug_domain);
}

}  // namespace

void debug_report_reset() {
  report().Clear();
}

void debug_report_set(const char* name, const std::string& value) {
  report().SetNameValue(name, value.c_str());
}

char** debug_report() {
  return report().List();
}

std::optional<std::string> CountingDigestCache::get(const std::string& path,
                                                    const FileIdentity& identity) {
  ++m_singles;
  std::optional<std::string> digest = m_backing.get(path, identity);
  if (digest) {
    found(path);
  }
  return digest;
}

void CountingDigestCache::put(const std::string& path, const FileIdentity& identity,
                              const std::string& digest) {
  m_backing.put(path, identity, digest);
}

std::map<std::string, std::string> CountingDigestCache::get_many(
    const std::vector<Entry>& entries) {
  ++m_batches;
  std::map<std::string, std::string> digests = m_backing.get_many(entries);
  for (const auto& entry : digests) {
    found(entry.first);
  }
  return digests;
}

void CountingDigestCache::read_ahead(const std::vector<std::string>& paths) {
  m_backing.read_ahead(paths);
}

void CountingDigestCache::found(const std::string& path) {
  ++(STARTS_WITH(path.c_str(), "idem-memo:") ? m_memos_found : m_digests_found);
}

void CountingDigestCache::report() const {
  debug_report_set("DIGEST_LOOKUPS_BATCHED", std::to_string(m_batches));
  debug_report_set("DIGEST_LOOKUPS_SINGLE", std::to_string(m_singles));
  debug_report_set("MEMO_ENTRIES_FOUND", std::to_string(m_memos_found));
  debug_report_set("SOURCE_DIGESTS_FOUND", std::to_string(m_digests_found));
}

compat::MetadataList IdemDriver::GetMetadata(const char* domain) {
  return is_debug_domain(domain) ? debug_report() : GDALDriver::GetMetadata(domain);
}

const char* IdemDriver::GetMetadataItem(const char* name, const char* domain) {
  return is_debug_domain(domain) ? report().FetchNameValue(name)
                                 : GDALDriver::GetMetadataItem(name, domain);
}

}  // namespace idem
