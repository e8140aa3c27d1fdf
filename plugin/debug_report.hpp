// SPDX-License-Identifier: MIT
// What this thread's last CreateCopy through IDEM did, as name=value items in two metadata domains
// of the IDEM driver, read on the driver (gdal.GetDriverByName("IDEM").GetMetadata(domain)),
// since the dataset a CreateCopy returns is the output driver's, and the call may have returned
// none:
// - RESULT (docs/configuration.md, "The result of a call"): the public, documented outcome that
//   programs read (gdal_idem's result objects): OUTCOME, KEY, ATTEMPT, OUTPUT, FILES, timings,
//   and ERROR_KIND/ERROR on failure;
// - _DEBUG_ (docs/configuration.md, "Debug metadata"): internals for tests and the curious, as
//   GDAL drivers expose them in that domain; they may change between releases.
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
inline constexpr const char* k_result_domain = "RESULT";

// Starts this thread's reports afresh (at the start of a CreateCopy).
void call_reports_reset();
void debug_report_set(const char* name, const std::string& value);
void result_report_set(const char* name, const std::string& value);
// This thread's report of `domain` (_DEBUG_ or RESULT, case-insensitive) as GetMetadata returns
// a domain, valid until the thread's next call; nullptr for another domain.
char** call_report(const char* domain);
// Whether `domain` is one of the two.
bool is_call_report_domain(const char* domain);

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

}  // namespace idem
