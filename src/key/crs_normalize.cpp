// SPDX-License-Identifier: MIT
// CRS normalisation for the key: every spelling of one CRS gives one canonical form.
#include "key/crs_normalize.hpp"

#include <proj.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "base/canonical_json.hpp"
#include "base/error.hpp"
#include "base/sha256.hpp"
#include "cpl_conv.h"
#include "cpl_string.h"
#include "cpl_vsi.h"
#include "gdal.h"
#include "ogr_spatialref.h"

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
  const std::string definition = trim_space(raw_definition);
  CPLStringList options;
  options.AddString("ALLOW_NETWORK_ACCESS=NO");
  options.AddString("ALLOW_FILE_ACCESS=NO");
  CPLErrorStateBackuper error_state;
  CPLErrorHandlerPusher quiet(CPLQuietErrorHandler);
  if (definition.empty() ||
      srs.SetFromUserInput(definition.c_str(), options.List()) != OGRERR_NONE) {
    throw Error(ErrorKind::k_usage, "cannot parse CRS '" + definition +
                                        "': give an EPSG code (EPSG:3857), a PROJ string or WKT");
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
// uses; the data axis mapping is recorded apart). The axis order of a projected CRS's base
// geographic CRS is a matter of spelling too (a PROJ string's is longitude first, EPSG's
// latitude first): it changes no projected coordinate, so it is set aside as well.
bool equivalent_ignoring_axis_order(const PJ* a, const PJ* b) {
  if (equivalent(a, b) ||
      proj_is_equivalent_to_with_ctx(thread_context(), a, b,
                                     PJ_COMP_EQUIVALENT_EXCEPT_AXIS_ORDER_GEOGCRS) != 0) {
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
    std::string id = std::string(authority) + ":" + code;
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

// What the answers depend on besides the question: GDAL parses the definition, PROJ and its
// database identify it. proj.db is found the way a new PROJ context finds it, by its search
// path, and stands for itself by size and mtime (opening it is what the memo saves).
std::string memo_environment() {
  static const std::string environment = [] {
    std::string text =
        std::string("gdal ") + GDALVersionInfo("RELEASE_NAME") + "; proj " + proj_info().version;
    const std::string search_path = proj_info().searchpath != nullptr ? proj_info().searchpath : "";
    text += "; path " + search_path;
    // ':'-separated on Unix, ';' on Windows.
    const CPLStringList directories(CSLTokenizeString2(search_path.c_str(), ":;", 0));
    for (int i = 0; i < directories.size(); ++i) {
      VSIStatBufL info;
      const std::string database = std::string(directories[i]) + "/proj.db";
      if (VSIStatL(database.c_str(), &info) == 0) {
        text += "; db " + database + " " + std::to_string(info.st_size) + " " +
                std::to_string(static_cast<long long>(info.st_mtime));
        break;
      }
    }
    return text;
  }();
  return environment;
}

// The memo's entry for a question: a pseudo-path in the digest cache (no file has it, and the
// zero identity never matches a real file's), the answer in a small line format.
constexpr const char* k_memo_prefix = "idem-memo:crs-v1:";
const FileIdentity k_memo_identity{};

std::string memo_path(const std::string& definition, const std::string& data_axis_mapping) {
  return k_memo_prefix +
         sha256_hex(memo_environment() + "\n" + data_axis_mapping + "\n" + definition);
}

// "id\tEPSG:4326" or "projjson\t{...}", then "\n" and the data axes joined by commas (empty
// when there is no mapping).
std::string encode_answer(const JsonValue& answer) {
  const JsonValue* crs = answer.find("crs");
  if (crs == nullptr) {
    return std::string();
  }
  std::string text;
  if (crs->is_string()) {
    text = "id\t" + crs->text();
  } else if (const JsonValue* projjson = crs->find("projjson")) {
    text = "projjson\t" + projjson->text();
  } else {
    return std::string();
  }
  text += "\n";
  if (const JsonValue* axes = answer.find("data_axes")) {
    for (std::size_t i = 0; i < axes->items().size(); ++i) {
      text += (i > 0 ? "," : "") + axes->items()[i].text();
    }
  }
  return text;
}

std::optional<JsonValue> decode_answer(const std::string& text, bool has_mapping) {
  const auto tab = text.find('\t');
  const auto newline = text.rfind('\n');
  if (tab == std::string::npos || newline == std::string::npos || newline < tab) {
    return std::nullopt;
  }
  const std::string kind = text.substr(0, tab);
  const std::string value = text.substr(tab + 1, newline - tab - 1);
  const std::string axes = text.substr(newline + 1);
  if (value.empty() || value.find('\n') != std::string::npos || axes.empty() == has_mapping) {
    return std::nullopt;
  }
  JsonValue answer = JsonValue::object();
  if (kind == "id") {
    answer.set("crs", JsonValue::string(value));
  } else if (kind == "projjson") {
    JsonValue crs = JsonValue::object();
    crs.set("projjson", JsonValue::string(value));
    answer.set("crs", std::move(crs));
  } else {
    return std::nullopt;
  }
  if (has_mapping) {
    JsonValue list = JsonValue::array();
    const CPLStringList names(CSLTokenizeString2(axes.c_str(), ",", 0));
    for (int i = 0; i < names.size(); ++i) {
      list.push_back(JsonValue::string(names[i]));
    }
    answer.set("data_axes", std::move(list));
  }
  return answer;
}

}  // namespace

// Normalising asks PROJ's database; a batch of tiles asks the same few questions thousands of
// times in one process, so answers are remembered (errors are not), and across processes by
// `memo` when there is one.
namespace {

class RememberedAnswers {
 public:
  using Question = std::pair<std::string, std::string>;  // definition, data axis mapping

  static RememberedAnswers& instance() {
    static RememberedAnswers answers;
    return answers;
  }
  std::optional<JsonValue> find(const Question& question) {
    std::lock_guard<std::mutex> lock(m_mutex);
    const auto found = m_answers.find(question);
    if (found == m_answers.end()) {
      return std::nullopt;
    }
    return found->second;
  }
  void remember(const Question& question, const JsonValue& answer) {
    constexpr size_t k_max_remembered = 256;
    std::lock_guard<std::mutex> lock(m_mutex);
    if (m_answers.size() >= k_max_remembered) {
      m_answers.clear();
    }
    m_answers.emplace(question, answer);
  }

 private:
  std::mutex m_mutex;
  std::map<Question, JsonValue> m_answers;
};

}  // namespace

namespace {

// The questions this process has no answer for yet, by the memo path that would hold each.
std::map<std::string, RememberedAnswers::Question> unanswered_by_memo_path(
    const std::vector<std::pair<std::string, std::string>>& questions) {
  std::map<std::string, RememberedAnswers::Question> by_path;
  for (const auto& question : questions) {
    if (!RememberedAnswers::instance().find(question)) {
      by_path.emplace(memo_path(question.first, question.second), question);
    }
  }
  return by_path;
}

}  // namespace

std::vector<std::string> crs_memo_paths(
    const std::vector<std::pair<std::string, std::string>>& questions) {
  std::vector<std::string> paths;
  for (const auto& entry : unanswered_by_memo_path(questions)) {
    paths.push_back(entry.first);
  }
  return paths;
}

std::map<std::string, std::string> prefetch_crs_answers(
    const std::vector<std::pair<std::string, std::string>>& questions, DigestCache& memo,
    const std::vector<DigestCache::Entry>& also) {
  const std::map<std::string, RememberedAnswers::Question> by_path =
      unanswered_by_memo_path(questions);
  std::map<std::string, std::string> found_also;
  if (by_path.empty() && also.empty()) {
    return found_also;
  }
  std::vector<DigestCache::Entry> entries = also;
  for (const auto& entry : by_path) {
    entries.emplace_back(entry.first, k_memo_identity);
  }
  std::size_t read = 0;
  for (auto& [path, text] : memo.get_many(entries)) {
    const auto question = by_path.find(path);
    if (question == by_path.end()) {
      found_also.emplace(path, std::move(text));
      continue;
    }
    // Unreadable entries are left to normalize_crs_with_axes, which recomputes them.
    if (auto answer = decode_answer(text, !question->second.second.empty())) {
      CPLDebug("IDEM", "CRS normalisation read from the ledger's memo");
      RememberedAnswers::instance().remember(question->second, *answer);
      ++read;
    }
  }
  CPLDebug("IDEM", "CRS memo: %zu of %zu answers read in one lookup (with %zu of %zu digests)",
           read, by_path.size(), found_also.size(), also.size());
  return found_also;
}

JsonValue normalize_crs_with_axes(const std::string& definition,
                                  const std::string& data_axis_mapping, DigestCache* memo) {
  const auto question = std::make_pair(definition, data_axis_mapping);
  if (auto known = RememberedAnswers::instance().find(question)) {
    return *known;
  }
  std::optional<JsonValue> answer;
  const std::string path = memo != nullptr ? memo_path(definition, data_axis_mapping) : "";
  if (memo != nullptr) {
    if (const auto text = memo->get(path, k_memo_identity)) {
      answer = decode_answer(*text, !data_axis_mapping.empty());
      CPLDebug("IDEM", "CRS normalisation %s from the ledger's memo",
               answer ? "read" : "unreadable, recomputed");
    }
  }
  if (!answer) {
    answer = normalize_crs_with_axes_uncached(definition, data_axis_mapping);
    const std::string text = memo != nullptr ? encode_answer(*answer) : "";
    if (!text.empty()) {
      memo->put(path, k_memo_identity, text);
    }
  }
  RememberedAnswers::instance().remember(question, *answer);
  return *answer;
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
    if (index < 0 || index >= axis_count || srs.GetAxis(nullptr, index, &orientation) == nullptr) {
      // Not a mapping we can interpret: keep it as written (a rebuild is safe).
      axes.push_back(JsonValue::string("axis " + std::string(tokens[i])));
      continue;
    }
    axes.push_back(
        JsonValue::string(std::string(mapped < 0 ? "-" : "") + OSRAxisEnumToName(orientation)));
  }
  result.set("data_axes", std::move(axes));
  return result;
}

}  // namespace

}  // namespace idem
