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

char** IdemDriver::GetMetadata(const char* domain) {
  return is_debug_domain(domain) ? debug_report() : GDALDriver::GetMetadata(domain);
}

const char* IdemDriver::GetMetadataItem(const char* name, const char* domain) {
  return is_debug_domain(domain) ? report().FetchNameValue(name)
                                 : GDALDriver::GetMetadataItem(name, domain);
}

}  // namespace idem
