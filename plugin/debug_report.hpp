// The IDEM driver's _DEBUG_ metadata (docs/configuration.md, "Debug metadata"): what this thread's
// last CreateCopy through IDEM did, as name=value items. GDAL drivers expose internals for tests
// and for the curious in their _DEBUG_ domain; this one is read on the driver
// (gdal.GetDriverByName("IDEM").GetMetadata("_DEBUG_")), since the dataset a CreateCopy returns
// is the output driver's, and the call may have returned none.
#pragma once

#include <string>

#include "gdal_priv.h"

namespace idem {

inline constexpr const char* k_debug_domain = "_DEBUG_";

// Starts this thread's report afresh (at the start of a CreateCopy).
void debug_report_reset();
void debug_report_set(const char* name, const std::string& value);
// This thread's report, as GetMetadata returns a domain (valid until the thread's next call).
char** debug_report();

// GDALDriver with the _DEBUG_ domain above.
class IdemDriver final : public GDALDriver {
 public:
  char** GetMetadata(const char* domain) override;
  const char* GetMetadataItem(const char* name, const char* domain) override;
};

}  // namespace idem
