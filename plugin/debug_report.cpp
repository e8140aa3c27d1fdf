// SPDX-License-Identifier: MIT
// The reports of the calling thread's last CreateCopy: RESULT and _DEBUG_ (debug_report.hpp).
#include "debug_report.hpp"

#include "cpl_string.h"

namespace idem {

namespace {

CPLStringList& debug_items() {
  thread_local CPLStringList items;
  return items;
}

CPLStringList& result_items() {
  thread_local CPLStringList items;
  return items;
}

}  // namespace

void call_reports_reset() {
  debug_items().Clear();
  result_items().Clear();
}

void debug_report_set(const char* name, const std::string& value) {
  debug_items().SetNameValue(name, value.c_str());
}

void result_report_set(const char* name, const std::string& value) {
  result_items().SetNameValue(name, value.c_str());
}

bool is_call_report_domain(const char* domain) {
  return domain != nullptr && (EQUAL(domain, k_debug_domain) || EQUAL(domain, k_result_domain));
}

char** call_report(const char* domain) {
  if (domain == nullptr) {
    return nullptr;
  }
  if (EQUAL(domain, k_debug_domain)) {
    return debug_items().List();
  }
  return EQUAL(domain, k_result_domain) ? result_items().List() : nullptr;
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

}  // namespace idem
