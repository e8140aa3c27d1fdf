// The IDEM driver's _DEBUG_ metadata (docs/configuration.md, "Debug metadata"): what this thread's
// last CreateCopy through IDEM did, as name=value items. GDAL drivers expose internals for tests
// and for the curious in their _DEBUG_ domain; this one is read on the driver
// (gdal.GetDriverByName("IDEM").GetMetadata("_DEBUG_")), since the dataset a CreateCopy returns
// is the output driver's, and the call may have returned none.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/digest_cache.hpp"
#include "base/gdal_compat.hpp"
#include "gdal_priv.h"

namespace idem {

inline constexpr const char* k_debug_domain = "_DEBUG_";

// Starts this thread's report afresh (at the start of a CreateCopy).
void debug_report_reset();
void debug_report_set(const char* name, const std::string& value);
// This thread's report, as GetMetadata returns a domain (valid until the thread's next call).
char** debug_report();

// The ledger's digest cache as the key sees it, counting what was asked and found (memo entries,
// "idem-memo:...", apart from source digests) for the report.
class CountingDigestCache final : public DigestCache {
 public:
  explicit CountingDigestCache(DigestCache& backing) : m_backing(backing) {}
  std::optional<std::string> get(const std::string& path, const FileIdentity& identity) override;
  void put(const std::string& path, const FileIdentity& identity,
           const std::string& digest) override;
  std::map<std::string, std::string> get_many(const std::vector<Entry>& entries) override;
  void read_ahead(const std::vector<std::string>& paths) override;
  // DIGEST_LOOKUPS_BATCHED, DIGEST_LOOKUPS_SINGLE, MEMO_ENTRIES_FOUND, SOURCE_DIGESTS_FOUND.
  void report() const;

 private:
  void found(const std::string& path);

  DigestCache& m_backing;
  int64_t m_batches = 0;
  int64_t m_singles = 0;
  int64_t m_memos_found = 0;
  int64_t m_digests_found = 0;
};

// GDALDriver with the _DEBUG_ domain above.
class IdemDriver final : public GDALDriver {
 public:
  compat::MetadataList GetMetadata(const char* domain) override;
  const char* GetMetadataItem(const char* name, const char* domain) override;
};

}  // namespace idem
