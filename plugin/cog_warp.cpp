// SPDX-License-Identifier: MIT
#include "cog_warp.hpp"

#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "base/held_messages.hpp"
#include "cpl_error.h"
#include "cpl_minixml.h"
#include "gdal_utils.h"
#include "ogr_spatialref.h"
#include "warp_engine.hpp"

namespace idem {

namespace {

// gdalwarp's -r names of the resampling methods, by the names GDALSerializeWarpOptions writes.
const char* gdalwarp_resampling_name(const std::string& serialised) {
  static const std::map<std::string, const char*> names = {{"NearestNeighbour", "near"},
                                                           {"Bilinear", "bilinear"},
                                                           {"Cubic", "cubic"},
                                                           {"CubicSpline", "cubicspline"},
                                                           {"Lanczos", "lanczos"},
                                                           {"Average", "average"},
                                                           {"RootMeanSquare", "rms"},
                                                           {"Mode", "mode"},
                                                           {"Maximum", "max"},
                                                           {"Minimum", "min"},
                                                           {"Median", "med"},
                                                           {"Quartile1", "q1"},
                                                           {"Quartile3", "q3"},
                                                           {"Sum", "sum"}};
  const auto found = names.find(serialised);
  return found != names.end() ? found->second : nullptr;
}

// The parts of a warped VRT's XML that gdalwarp's arguments decide.
class WarpedVrtXml {
 public:
  explicit WarpedVrtXml(const std::string& xml) : m_tree(CPLParseXMLString(xml.c_str())) {
    m_root = m_tree.get() != nullptr ? CPLGetXMLNode(m_tree.get(), "=VRTDataset") : nullptr;
    m_warp = m_root != nullptr ? CPLGetXMLNode(m_root, "GDALWarpOptions") : nullptr;
  }
  bool valid() const { return m_warp != nullptr; }
  std::string value(const char* path) const { return CPLGetXMLValue(m_root, path, ""); }
  std::string warp_value(const char* path) const { return CPLGetXMLValue(m_warp, path, ""); }
  bool warp_has(const char* path) const { return CPLGetXMLNode(m_warp, path) != nullptr; }
  // The first band's data type (gdalwarp's -ot sets them all).
  std::string band_type() const { return CPLGetXMLValue(m_root, "VRTRasterBand.dataType", ""); }
  // MaxError of the approximating transformer; "" without one (-et 0).
  std::string max_error() const {
    return CPLGetXMLValue(m_warp, "Transformer.ApproxTransformer.MaxError", "");
  }
  // One value per band mapping (SrcNoDataReal, DstNoDataReal), space separated; "" if none.
  std::string band_values(const char* name) const {
    std::string values;
    const CPLXMLNode* list = CPLGetXMLNode(m_warp, "BandList");
    for (const CPLXMLNode* node = list != nullptr ? list->psChild : nullptr; node != nullptr;
         node = node->psNext) {
      const char* value = CPLGetXMLValue(node, name, nullptr);
      if (node->eType == CXT_Element && EQUAL(node->pszValue, "BandMapping") && value != nullptr) {
        values += (values.empty() ? "" : " ") + std::string(value);
      }
    }
    return values;
  }
  // The warp options (<Option name="...">), by name.
  std::map<std::string, std::string> options() const {
    std::map<std::string, std::string> found;
    for (const CPLXMLNode* node = m_warp->psChild; node != nullptr; node = node->psNext) {
      if (node->eType == CXT_Element && EQUAL(node->pszValue, "Option")) {
        found[CPLGetXMLValue(node, "name", "")] = CPLGetXMLValue(node, nullptr, "");
      }
    }
    return found;
  }
  // The output grid: size and geotransform, as written.
  std::string grid() const {
    return value("rasterXSize") + " " + value("rasterYSize") + " " + value("GeoTransform");
  }

 private:
  CPLXMLTreeCloser m_tree;
  CPLXMLNode* m_root = nullptr;
  CPLXMLNode* m_warp = nullptr;
};

// gdalwarp arguments, built round by round.
class Arguments {
 public:
  bool has(const char* flag) const {
    for (const std::string& word : m_words) {
      if (word == flag) {
        return true;
      }
    }
    return false;
  }
  // Adds the flag and its values unless the flag is there already (-wo: that very option);
  // whether it added them.
  bool add(std::vector<std::string> words) {
    if (words.front() == "-wo" ? has_pair(words.front(), words.back())
                               : has(words.front().c_str())) {
      return false;
    }
    m_words.insert(m_words.end(), words.begin(), words.end());
    return true;
  }
  bool has_pair(const std::string& flag, const std::string& value) const {
    for (size_t i = 0; i + 1 < m_words.size(); ++i) {
      if (m_words[i] == flag && m_words[i + 1] == value) {
        return true;
      }
    }
    return false;
  }
  // Replaces a flag and its `count` values by `words`.
  void replace(const char* flag, size_t count, std::vector<std::string> words) {
    for (size_t i = 0; i < m_words.size(); ++i) {
      if (m_words[i] == flag) {
        m_words.erase(m_words.begin() + static_cast<std::ptrdiff_t>(i),
                      m_words.begin() + static_cast<std::ptrdiff_t>(i + 1 + count));
        break;
      }
    }
    m_words.insert(m_words.end(), words.begin(), words.end());
  }
  CPLStringList list() const {
    CPLStringList list;
    for (const std::string& word : m_words) {
      list.AddString(word.c_str());
    }
    return list;
  }

 private:
  std::vector<std::string> m_words;
};

std::string number(double value) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.17g", value);
  return text;
}

// The -t_srs of a VRT's CRS: its authority code when it has one (AUTH:CODE), as users write it
// (the WKT of EPSG:3857 is not read into the same transformation as EPSG:3857), else its WKT.
std::string crs_argument(const std::string& wkt) {
  OGRSpatialReference crs;
  if (crs.importFromWkt(wkt.c_str()) == OGRERR_NONE) {
    const char* authority = crs.GetAuthorityName(nullptr);
    const char* code = crs.GetAuthorityCode(nullptr);
    if (authority != nullptr && code != nullptr) {
      return std::string(authority) + ":" + code;
    }
  }
  return wkt;
}

// The -te/-ts (or, `by_resolution`, -te/-tr) arguments of the grid of `target`; false for a
// rotated one, which gdalwarp cannot be asked for.
bool grid_arguments(const WarpedVrtXml& target, bool by_resolution, Arguments& arguments) {
  const CPLStringList parts(CSLTokenizeString2(target.value("GeoTransform").c_str(), ", ", 0));
  if (parts.size() != 6 || CPLAtof(parts[2]) != 0 || CPLAtof(parts[4]) != 0) {
    return false;
  }
  const double gt[6] = {CPLAtof(parts[0]), CPLAtof(parts[1]), CPLAtof(parts[2]),
                        CPLAtof(parts[3]), CPLAtof(parts[4]), CPLAtof(parts[5])};
  const int x_size = atoi(target.value("rasterXSize").c_str());
  const int y_size = atoi(target.value("rasterYSize").c_str());
  std::vector<std::string> extent = {"-te", number(gt[0]), number(gt[3] + y_size * gt[5]),
                                     number(gt[0] + x_size * gt[1]), number(gt[3])};
  const std::vector<std::string> size =
      by_resolution
          ? std::vector<std::string>{"-tr", number(gt[1]), number(-gt[5])}
          : std::vector<std::string>{"-ts", std::to_string(x_size), std::to_string(y_size)};
  if (!arguments.has("-te")) {
    arguments.add(extent);
    arguments.add(size);
  } else {
    arguments.replace(by_resolution ? "-ts" : "-tr", 2, size);
  }
  return true;
}

// Adds the arguments for what `made` (the warp of the arguments so far) does not have of
// `target`; whether it added any. The grid comes once the rest agrees, and the warp options last
// (-et and -dstalpha set some of them).
bool add_differences(const WarpedVrtXml& target, const WarpedVrtXml& made, Arguments& arguments) {
  bool added = false;
  if (target.value("SRS") != made.value("SRS") && !target.value("SRS").empty()) {
    added |= arguments.add({"-t_srs", crs_argument(target.value("SRS"))});
  }
  const std::string resampling = target.warp_value("ResampleAlg");
  if (resampling != made.warp_value("ResampleAlg")) {
    const char* name = gdalwarp_resampling_name(resampling);
    added |= name != nullptr && arguments.add({"-r", name});
  }
  if (target.warp_value("WorkingDataType") != made.warp_value("WorkingDataType")) {
    added |= arguments.add({"-wt", target.warp_value("WorkingDataType")});
  }
  if (target.band_type() != made.band_type()) {
    added |= arguments.add({"-ot", target.band_type()});
  }
  if (target.max_error() != made.max_error()) {
    added |= arguments.add({"-et", target.max_error().empty() ? "0" : target.max_error()});
  }
  if (target.warp_has("DstAlphaBand") && !made.warp_has("DstAlphaBand")) {
    added |= arguments.add({"-dstalpha"});
  }
  if (target.warp_has("SrcAlphaBand") != made.warp_has("SrcAlphaBand")) {
    added |= arguments.add({target.warp_has("SrcAlphaBand") ? "-srcalpha" : "-nosrcalpha"});
  }
  for (const auto& [element, flag] :
       {std::pair{"SrcNoDataReal", "-srcnodata"}, std::pair{"DstNoDataReal", "-dstnodata"}}) {
    const std::string values = target.band_values(element);
    if (values != made.band_values(element)) {
      added |= arguments.add({flag, values.empty() ? "None" : values});
    }
  }
  if (added) {
    return true;
  }
  // The grid once the CRS agrees (-t_srs alone makes gdalwarp find the grid): -te/-ts first,
  // -te/-tr when those give a geotransform a bit off.
  if (target.grid() != made.grid()) {
    const bool retry = arguments.has("-te") && !arguments.has("-tr");
    return (!arguments.has("-te") || retry) && grid_arguments(target, retry, arguments);
  }
  const std::map<std::string, std::string> made_options = made.options();
  for (const auto& [name, value] : target.options()) {
    const auto found = made_options.find(name);
    if (found == made_options.end() || found->second != value) {
      added |= arguments.add({"-wo", name + "=" + value});
    }
  }
  return added;
}

// The warped VRT GDALWarp(`arguments` -of VRT) makes of `source`, serialised; "" when it fails.
std::string warped_vrt_of(GDALDataset* source, const CPLStringList& arguments) {
  CPLStringList argv(arguments);
  argv.AddString("-of");
  argv.AddString("VRT");
  CPLErrorHandlerPusher quiet(CPLQuietErrorHandler);
  GDALWarpAppOptions* options = GDALWarpAppOptionsNew(argv.List(), nullptr);
  if (options == nullptr) {
    return std::string();
  }
  GDALDatasetH handle = GDALDataset::ToHandle(source);
  int usage_error = FALSE;
  GDALDatasetH made = GDALWarp("", nullptr, 1, &handle, options, &usage_error);
  GDALWarpAppOptionsFree(options);
  if (made == nullptr) {
    return std::string();
  }
  CSLConstList xml = GDALDataset::FromHandle(made)->GetMetadata("xml:VRT");
  std::string text = xml != nullptr && xml[0] != nullptr ? xml[0] : "";
  GDALReleaseDataset(made);
  return text;
}

}  // namespace

std::optional<CPLStringList> gdalwarp_arguments_for(GDALDataset* source,
                                                    const std::string& target_xml,
                                                    const std::string& target_canonical,
                                                    const CanonicalVrt& canonical) {
  const WarpedVrtXml target(target_xml);
  if (!target.valid() || target.warp_has("Cutline")) {
    return std::nullopt;
  }
  Arguments arguments;
  constexpr int k_rounds = 6;
  for (int round = 0; round < k_rounds; ++round) {
    const CPLStringList list = arguments.list();
    const std::string made = warped_vrt_of(source, list);
    if (made.empty()) {
      return std::nullopt;
    }
    if (canonical(made) == target_canonical) {
      return list;
    }
    if (!add_differences(target, WarpedVrtXml(made), arguments)) {
      return std::nullopt;
    }
  }
  return std::nullopt;
}

bool gdalwarp_resamples_onto_cog_grid() {
  constexpr int k_first_release = 3090000;  // 3.9.0
  return atoi(GDALVersionInfo("VERSION_NUM")) >= k_first_release;
}

std::optional<CPLStringList> cog_resampling_arguments(GDALDataset* source,
                                                      const std::string& vrt_xml,
                                                      const std::string& vrt_canonical,
                                                      const CanonicalVrt& canonical) {
  if (!gdalwarp_resamples_onto_cog_grid() || source == nullptr ||
      WarpedVrtXml(vrt_xml).warp_value("ResampleAlg") != "NearestNeighbour") {
    return std::nullopt;
  }
  std::optional<CPLStringList> arguments =
      gdalwarp_arguments_for(source, vrt_xml, vrt_canonical, canonical);
  if (!arguments || arguments->FindString("-te") < 0) {
    return std::nullopt;
  }
  return arguments;
}

bool cog_grid_reinterpreted(const CPLStringList& arguments) {
  return arguments.FindString("-te") >= 0 && arguments.FindString("-t_srs") < 0;
}

CPLStringList cog_warp_arguments(GDALDataset* source, const std::string& vrt_xml,
                                 const std::string& vrt_canonical, const CanonicalVrt& canonical) {
  const char* const instead =
      " Set the grid on the warp instead (-t_srs, -tr, -te, -tap) and drop the COG grid "
      "options, or write the COG without IDEM.";
  std::optional<CPLStringList> arguments;
  if (source != nullptr) {
    arguments = gdalwarp_arguments_for(source, vrt_xml, vrt_canonical, canonical);
  }
  if (!arguments) {
    throw Error(ErrorKind::k_usage,
                std::string("this warp into a COG with grid options (TILING_SCHEME, TARGET_SRS) "
                            "cannot be run the way gdalwarp -of COG runs it: IDEM found no "
                            "gdalwarp arguments that make the same warp (cutlines, -to options, "
                            "band selections and sources with open options are not supported "
                            "with these options).") +
                    instead);
  }
  if (cog_grid_reinterpreted(*arguments)) {
    throw Error(ErrorKind::k_usage,
                "gdalwarp -of COG reads -te, -tr and -ts in the CRS of the COG's grid when no "
                "-t_srs is given, and IDEM cannot tell which of them this warp was given: add "
                "-t_srs with the CRS of the COG's grid (EPSG:3857 for GoogleMapsCompatible, or "
                "the TARGET_SRS).");
  }
  return *arguments;
}

CogWarpPlan plan_cog_warp(GDALDataset* vrt, const WorkDescription& work,
                          const KeptSources& kept_sources, const CanonicalVrt& canonical) {
  CogWarpPlan plan;
  plan.source = kept_warp_source(vrt, work.vrt_xml, kept_sources);
  if (work.cog_warp) {
    plan.arguments = cog_warp_arguments(plan.source, work.vrt_xml, work.vrt_canonical, canonical);
  } else {
    plan.arguments =
        cog_resampling_arguments(plan.source, work.vrt_xml, work.vrt_canonical, canonical);
  }
  return plan;
}

}  // namespace idem
