// CRS normalisation for the key: every spelling of one CRS gives one canonical form.
#include "core/crs_normalize.hpp"

#include <map>
#include <mutex>
#include <utility>

#include <proj.h>

#include <cstdlib>
#include <memory>
#include <vector>

#include "cpl_string.h"
#include "ogr_spatialref.h"
#include "core/error.hpp"

namespace idem {

namespace {

struct ContextFree {
  void operator()(PJ_CONTEXT* context) const { proj_context_destroy(context); }
};
struct PjFree {
  void operator()(PJ* object) const { proj_destroy(object); }
};
struct PjListFree {
  void operator()(PJ_OBJ_LIST* list) const { proj_list_destroy(list); }
};
using PjPtr = std::unique_ptr<PJ, PjFree>;

std::string trim(const std::string& text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) {
    return std::string();
  }
  const auto last = text.find_last_not_of(" \t\r\n");
  return text.substr(first, last - first + 1);
}

// One PROJ context per thread: contexts are not thread-safe and opening proj.db is not free.
PJ_CONTEXT* thread_context() {
  thread_local std::unique_ptr<PJ_CONTEXT, ContextFree> context(proj_context_create());
  if (!context) {
    throw Error(ErrorKind::k_internal, "PROJ: cannot create a context");
  }
  return context.get();
}

// Parse through GDAL (which knows every spelling GDAL tools accept), refusing URLs and files.
void parse_definition(const std::string& raw_definition, OGRSpatialReference& srs) {
  const std::string definition = trim(raw_definition);
  CPLStringList options;
  options.AddString("ALLOW_NETWORK_ACCESS=NO");
  options.AddString("ALLOW_FILE_ACCESS=NO");
  CPLErrorStateBackuper error_state;
  CPLErrorHandlerPusher quiet(CPLQuietErrorHandler);
  if (definition.empty() || srs.SetFromUserInput(definition.c_str(), options.List()) != OGRERR_NONE) {
    throw Error(ErrorKind::k_usage, "cannot parse CRS '" + definition + "'");
  }
}

PjPtr to_proj(const OGRSpatialReference& srs, const std::string& definition) {
  char* projjson = nullptr;
  {
    CPLErrorStateBackuper error_state;
  CPLErrorHandlerPusher quiet(CPLQuietErrorHandler);
    if (srs.exportToPROJJSON(&projjson, nullptr) != OGRERR_NONE || projjson == nullptr) {
      CPLFree(projjson);
      throw Error(ErrorKind::k_usage, "cannot express CRS '" + definition + "' for PROJ");
    }
  }
  PjPtr crs(proj_create(thread_context(), projjson));
  CPLFree(projjson);
  if (!crs) {
    throw Error(ErrorKind::k_usage, "PROJ cannot parse CRS '" + definition + "'");
  }
  return crs;
}

bool equivalent(const PJ* a, const PJ* b) {
  return proj_is_equivalent_to_with_ctx(thread_context(), a, b, PJ_COMP_EQUIVALENT) != 0;
}

// Equivalent as given, or once both are put in east/north order (the order GDAL's transformer
// uses; the data axis mapping is recorded apart).
bool equivalent_ignoring_axis_order(const PJ* a, const PJ* b) {
  if (equivalent(a, b)) {
    return true;
  }
  PJ_CONTEXT* context = thread_context();
  PjPtr a_visual(proj_normalize_for_visualization(context, a));
  PjPtr b_visual(proj_normalize_for_visualization(context, b));
  return a_visual && b_visual && equivalent(a_visual.get(), b_visual.get());
}

// An authority code strictly equivalent to `crs`, or "". Among several equivalent entries (e.g.
// OGC:CRS84 and EPSG:4326 once axis order is set aside) EPSG wins, then PROJ's own ranking.
std::string identify(const PJ* crs) {
  PJ_CONTEXT* context = thread_context();
  int* confidences = nullptr;
  std::unique_ptr<PJ_OBJ_LIST, PjListFree> candidates(
      proj_identify(context, crs, nullptr, nullptr, &confidences));
  std::unique_ptr<int, decltype(&proj_int_list_destroy)> confidence_guard(confidences,
                                                                          &proj_int_list_destroy);
  if (!candidates) {
    return std::string();
  }
  std::string best;
  const int count = proj_list_get_count(candidates.get());
  for (int i = 0; i < count; ++i) {
    // Below 70 PROJ already knows the entry differs; equivalence is checked below regardless.
    if (confidences != nullptr && confidences[i] < 70) {
      continue;
    }
    PjPtr candidate(proj_list_get(context, candidates.get(), i));
    if (!candidate || !equivalent_ignoring_axis_order(candidate.get(), crs)) {
      continue;
    }
    const char* authority = proj_get_id_auth_name(candidate.get(), 0);
    const char* code = proj_get_id_code(candidate.get(), 0);
    if (authority == nullptr || code == nullptr) {
      continue;
    }
    const std::string id = std::string(authority) + ":" + code;
    if (std::string(authority) == "EPSG") {
      return id;
    }
    if (best.empty()) {
      best = id;
    }
  }
  return best;
}

JsonValue normalize_parsed(const OGRSpatialReference& srs, const std::string& definition) {
  PjPtr crs = to_proj(srs, definition);
  const std::string id = identify(crs.get());
  if (!id.empty()) {
    return JsonValue::string(id);
  }
  const char* const options[] = {"MULTILINE=NO", nullptr};
  const char* projjson = proj_as_projjson(thread_context(), crs.get(), options);
  if (projjson == nullptr) {
    throw Error(ErrorKind::k_usage, "PROJ cannot write CRS '" + definition + "' as PROJJSON");
  }
  JsonValue result = JsonValue::object();
  result.set("projjson", JsonValue::string(projjson));
  return result;
}

}  // namespace

}  // namespace idem

namespace idem {

JsonValue normalize_crs(const std::string& definition) {
  OGRSpatialReference srs;
  parse_definition(definition, srs);
  return normalize_parsed(srs, definition);
}

namespace {

JsonValue normalize_crs_with_axes_uncached(const std::string& definition,
                                           const std::string& data_axis_mapping);

}  // namespace

// Normalising asks PROJ's database; a batch of tiles asks the same few questions thousands of
// times in one process, so answers are remembered (errors are not).
JsonValue normalize_crs_with_axes(const std::string& definition,
                                  const std::string& data_axis_mapping) {
  constexpr size_t k_max_remembered = 256;
  static std::mutex mutex;
  static std::map<std::pair<std::string, std::string>, JsonValue> remembered;
  const auto question = std::make_pair(definition, data_axis_mapping);
  {
    std::lock_guard<std::mutex> lock(mutex);
    const auto found = remembered.find(question);
    if (found != remembered.end()) {
      return found->second;
    }
  }
  JsonValue answer = normalize_crs_with_axes_uncached(definition, data_axis_mapping);
  std::lock_guard<std::mutex> lock(mutex);
  if (remembered.size() >= k_max_remembered) {
    remembered.clear();
  }
  remembered.emplace(question, answer);
  return answer;
}

namespace {

JsonValue normalize_crs_with_axes_uncached(const std::string& definition,
                                           const std::string& data_axis_mapping) {
  OGRSpatialReference srs;
  parse_definition(definition, srs);
  JsonValue result = JsonValue::object();
  result.set("crs", normalize_parsed(srs, definition));
  if (data_axis_mapping.empty()) {
    return result;
  }
  const CPLStringList tokens(CSLTokenizeString2(data_axis_mapping.c_str(), ",", 0));
  JsonValue axes = JsonValue::array();
  const int axis_count = srs.GetAxesCount();
  for (int i = 0; i < tokens.size(); ++i) {
    const int mapped = std::atoi(tokens[i]);
    const int index = mapped < 0 ? -mapped - 1 : mapped - 1;
    OGRAxisOrientation orientation = OAO_Other;
    if (index < 0 || index >= axis_count ||
        srs.GetAxis(nullptr, index, &orientation) == nullptr) {
      // Not a mapping we can interpret: keep it as written (a rebuild is safe).
      axes.push_back(JsonValue::string("axis " + std::string(tokens[i])));
      continue;
    }
    axes.push_back(JsonValue::string(std::string(mapped < 0 ? "-" : "") +
                                     OSRAxisEnumToName(orientation)));
  }
  result.set("data_axes", std::move(axes));
  return result;
}

}  // namespace

std::string normalized_crs_text(const std::string& definition) {
  const JsonValue normalized = normalize_crs(definition);
  return normalized.is_string() ? normalized.text() : normalized.dump();
}

}  // namespace idem
