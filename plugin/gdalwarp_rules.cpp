// SPDX-License-Identifier: MIT
// gdalwarp's own decisions about a warp it runs itself, made the same way for IDEM's warp
// (gdalwarp_rules.hpp).
#include "gdalwarp_rules.hpp"

#include <dlfcn.h>
#include <execinfo.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "base/error.hpp"
#include "base/gdal_compat.hpp"
#include "base/held_messages.hpp"
#include "base/paths.hpp"
#include "cpl_conv.h"
#include "cpl_minixml.h"
#include "cpl_string.h"
#include "gdal_alg.h"
#include "gdal_priv.h"
#include "gdal_proxy.h"
#include "gdal_utils.h"
#include "key/command_line.hpp"
#include "output_datasets.hpp"

namespace idem {

namespace {

constexpr const char* k_debug_category = "IDEM";

// gdalwarp reads an INIT_DEST value within float rounding of the float range's ends as that end.
double adjust_close_to_float_max(double value) {
  constexpr double k_float_max = std::numeric_limits<float>::max();
  if (std::fabs(value - k_float_max) < 1e-10 * k_float_max) {
    return k_float_max;
  }
  if (std::fabs(value + k_float_max) < 1e-10 * k_float_max) {
    return -k_float_max;
  }
  return value;
}

// Whether the source transformer in a serialised GenImgProjTransformer is one gdalwarp chooses
// for an RPC source with METHOD unset or METHOD=RPC: the RPC transformer, or the source's
// geotransform or GCPs that GDAL prefers to its RPCs when no METHOD is given. A METHOD naming the
// default explicitly is not told apart (docs/internals.md §10).
bool rpc_method(const CPLXMLNode* gen_img_proj, GDALDataset* source) {
  if (CPLGetXMLNode(gen_img_proj, "SrcRPCTransformer") != nullptr) {
    return true;
  }
  double geotransform[6];
  const bool has_geotransform = compat::get_geotransform(source, geotransform) == CE_None;
  if (CPLGetXMLNode(gen_img_proj, "SrcGeoTransform") != nullptr) {
    return has_geotransform;
  }
  return CPLGetXMLNode(gen_img_proj, "SrcGCPTransformer") != nullptr && !has_geotransform &&
         source->GetGCPCount() > 0;
}

}  // namespace

// What gdalwarp sets on the output it creates (and, in VRT mode, on the VRT): georeferencing,
// metadata, and per band nodata, colour interpretation, colour table, description, metadata,
// offset/scale, unit and attribute table. gdalwarp sets the colour interpretation of an output
// it creates itself only with -setci and for the alpha band of -dstalpha (GeoTIFFs get theirs
// from PHOTOMETRIC); the VRT carries it always: `all_colour_interpretations` is true for a
// GeoTIFF, and otherwise only an alpha band's is set (docs/internals.md §9).
void copy_dataset_info(GDALDataset* vrt, GDALDataset* output, bool all_colour_interpretations) {
  double geotransform[6];
  if (compat::get_geotransform(vrt, geotransform) == CE_None) {
    compat::set_geotransform(output, geotransform);
  }
  if (const OGRSpatialReference* srs = vrt->GetSpatialRef()) {
    output->SetSpatialRef(srs);
  }
  // GetMetadata returns CSLConstList since 3.13 and SetMetadata takes one; both char** before.
  if (CSLConstList metadata = vrt->GetMetadata()) {
    output->SetMetadata(const_cast<char**>(metadata));
  }
  for (int i = 1; i <= vrt->GetRasterCount(); ++i) {
    GDALRasterBand* from = vrt->GetRasterBand(i);
    GDALRasterBand* to = output->GetRasterBand(i);
    int has_nodata = FALSE;
    if (from->GetRasterDataType() == GDT_Int64) {
      const auto value = from->GetNoDataValueAsInt64(&has_nodata);
      if (has_nodata) {
        to->SetNoDataValueAsInt64(value);
      }
    } else if (from->GetRasterDataType() == GDT_UInt64) {
      const auto value = from->GetNoDataValueAsUInt64(&has_nodata);
      if (has_nodata) {
        to->SetNoDataValueAsUInt64(value);
      }
    } else {
      const double value = from->GetNoDataValue(&has_nodata);
      if (has_nodata) {
        to->SetNoDataValue(value);
      }
    }
    // Undefined is set too: a GeoTIFF whose fourth band is made alpha while its first three are
    // left alone becomes RGB, where gdalwarp's (three Undefined bands and -dstalpha) stays
    // MINISBLACK, Gray/Undefined/Undefined/Alpha.
    const GDALColorInterp interp = from->GetColorInterpretation();
    if (all_colour_interpretations || interp == GCI_AlphaBand) {
      to->SetColorInterpretation(interp);
    }
    if (GDALColorTable* table = from->GetColorTable()) {
      to->SetColorTable(table);
    }
    if (from->GetDescription()[0] != '\0') {
      to->SetDescription(from->GetDescription());
    }
    if (CSLConstList metadata = from->GetMetadata()) {
      to->SetMetadata(const_cast<char**>(metadata));
    }
    int has_offset = FALSE;
    int has_scale = FALSE;
    const double offset = from->GetOffset(&has_offset);
    const double scale = from->GetScale(&has_scale);
    if (has_offset && offset != 0.0) {
      to->SetOffset(offset);
    }
    if (has_scale && scale != 1.0) {
      to->SetScale(scale);
    }
    if (from->GetUnitType() != nullptr && from->GetUnitType()[0] != '\0') {
      to->SetUnitType(from->GetUnitType());
    }
    if (char** categories = from->GetCategoryNames()) {
      to->SetCategoryNames(categories);
    }
    if (GDALRasterAttributeTable* table = from->GetDefaultRAT()) {
      to->SetDefaultRAT(table);
    }
  }
}

// Whether gdalwarp, creating `output` in `format` itself, would skip the chunks that have no
// source (SKIP_NOSOURCE=YES, set for new GTiff, GPKG and MEM outputs when INIT_DEST agrees with
// the output's nodata; docs/internals.md §10). The pixels do not depend on it; the RPC window
// below does.
bool gdalwarp_skips_nosource(const GDALWarpOptions& options, GDALDataset* output,
                             const char* format) {
  CSLConstList warp_options = options.papszWarpOptions;
  if (const char* value = CSLFetchNameValue(warp_options, "SKIP_NOSOURCE")) {
    return CPLTestBool(value);
  }
  if (CSLFetchNameValue(warp_options, "STREAMABLE_OUTPUT") != nullptr) {
    return false;
  }
  const bool mem = EQUAL(format, "MEM");
  if (!mem && !EQUAL(format, "GTiff") && !EQUAL(format, "GPKG")) {
    return false;
  }
  const int band_count = output->GetRasterCount();
  const char* init_dest = CSLFetchNameValue(warp_options, "INIT_DEST");
  const CPLStringList tokens(
      init_dest == nullptr || EQUAL(init_dest, "NO_DATA") ? nullptr : CSLTokenizeString(init_dest));
  if (!tokens.empty() && tokens.size() != 1 && tokens.size() != band_count) {
    return false;
  }
  for (int i = 0; i < band_count; ++i) {
    int has_nodata = FALSE;
    const double nodata = output->GetRasterBand(i + 1)->GetNoDataValue(&has_nodata);
    // The MEM driver reads unwritten blocks as 0.
    if (mem && has_nodata && nodata != 0.0) {
      return false;
    }
    if (!tokens.empty()) {
      const double init =
          adjust_close_to_float_max(CPLAtofM(tokens[std::min(i, tokens.size() - 1)]));
      if (!((has_nodata && init == nodata) || (!has_nodata && init == 0.0))) {
        return false;
      }
    }
  }
  return true;
}

// gdalwarp's restriction of an RPC warp into a new output (its AdjustOutputExtentForRPC): RPCs
// can find source pixels for points outside the source's footprint, so gdalwarp warps only the
// footprint's bounding box plus 5 pixels, unless RESTRICT_OUTPUT_DATASET_UPDATE=NO. Returns the
// window to warp, empty when the footprint misses the output (docs/internals.md §10).
WarpWindow gdalwarp_window(const GDALWarpOptions& options, GDALDataset* output,
                           bool skip_nosource) {
  WarpWindow window{0, 0, output->GetRasterXSize(), output->GetRasterYSize()};
  GDALDataset* source = GDALDataset::FromHandle(options.hSrcDS);
  if (!skip_nosource || source == nullptr || source->GetMetadata("RPC") == nullptr ||
      !CPLTestBool(CPLGetConfigOption("RESTRICT_OUTPUT_DATASET_UPDATE", "YES")) ||
      options.pfnTransformer == nullptr) {
    return window;
  }
  // gdalwarp measures the footprint with the exact transformer, not the approximation the warp
  // may use: take the GenImgProj transformer out of the serialised one.
  const CPLXMLTreeCloser tree(
      GDALSerializeTransformer(options.pfnTransformer, options.pTransformerArg));
  const CPLXMLNode* exact = tree.get();
  if (exact != nullptr && EQUAL(exact->pszValue, "ApproxTransformer")) {
    const CPLXMLNode* base = CPLGetXMLNode(exact, "BaseTransformer");
    exact = base == nullptr ? nullptr : base->psChild;
    while (exact != nullptr && exact->eType != CXT_Element) {
      exact = exact->psNext;
    }
  }
  if (exact == nullptr || !EQUAL(exact->pszValue, "GenImgProjTransformer") ||
      !rpc_method(exact, source)) {
    return window;
  }
  GDALTransformerFunc transform = nullptr;
  void* transform_arg = nullptr;
  if (GDALDeserializeTransformer(const_cast<CPLXMLNode*>(exact), &transform, &transform_arg) !=
          CE_None ||
      transform_arg == nullptr) {
    throw Error(ErrorKind::k_source,
                "cannot rebuild the RPC transformer of the warp: " + last_gdal_error());
  }
  double geotransform[6];
  double extent[4];
  int pixels = 0;
  int lines = 0;
  const CPLErr suggested =
      GDALSuggestedWarpOutput2(GDALDataset::ToHandle(source), transform, transform_arg,
                               geotransform, &pixels, &lines, extent, 0);
  GDALDestroyTransformer(transform_arg);
  constexpr double k_threshold = static_cast<double>(INT_MAX) / 2;
  if (suggested != CE_None ||
      !(std::fabs(extent[0]) < k_threshold && std::fabs(extent[1]) < k_threshold &&
        std::fabs(extent[2]) < k_threshold && std::fabs(extent[3]) < k_threshold)) {
    return window;
  }
  constexpr int k_padding = 5;
  window.x_off = std::max(0, static_cast<int>(std::floor(extent[0])) - k_padding);
  window.y_off = std::max(0, static_cast<int>(std::floor(extent[1])) - k_padding);
  window.x_size = std::min(output->GetRasterXSize() - window.x_off,
                           static_cast<int>(std::ceil(extent[2])) + k_padding - window.x_off);
  window.y_size = std::min(output->GetRasterYSize() - window.y_off,
                           static_cast<int>(std::ceil(extent[3])) + k_padding - window.y_off);
  CPLDebug(k_debug_category, "RPC source: warping the output window %d,%d,%dx%d", window.x_off,
           window.y_off, window.x_size, window.y_size);
  return window;
}

namespace {

// This process's arguments, as the kernel holds them (argv[0] first).
std::vector<std::string> arguments_of_this_process() {
  std::ifstream file("/proc/self/cmdline", std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  std::vector<std::string> arguments;
  std::string::size_type start = 0;
  while (start < text.size()) {
    const std::string::size_type end = text.find('\0', start);
    arguments.push_back(text.substr(start, end - start));
    if (end == std::string::npos) {
      break;
    }
    start = end + 1;
  }
  return arguments;
}

// An --optfile's arguments, read as GDAL's command-line processor reads them: a line starting with
// '#' is a comment, the others are split as a shell would (CSLTokenizeString).
std::vector<std::string> arguments_of_optfile(const std::string& path) {
  std::vector<std::string> arguments;
  const CPLStringList lines(CSLLoad(path.c_str()));
  for (int i = 0; i < lines.size(); ++i) {
    if (lines[i][0] == '#') {
      continue;
    }
    const CPLStringList tokens(CSLTokenizeString(lines[i]));
    for (int j = 0; j < tokens.size(); ++j) {
      arguments.emplace_back(tokens[j]);
    }
  }
  return arguments;
}

// The program's arguments without GDAL's general options (GDALGeneralCmdLineProcessor took them
// before the program parsed the rest), --optfile's read in their place.
std::vector<std::string> without_general_options(const std::vector<std::string>& argv) {
  std::vector<std::string> arguments;
  for (size_t i = 1; i < argv.size(); ++i) {
    const char* argument = argv[i].c_str();
    const bool has_value = i + 1 < argv.size();
    if (EQUAL(argument, "--optfile") && has_value) {
      const std::vector<std::string> more = arguments_of_optfile(argv[++i]);
      arguments.insert(arguments.end(), more.begin(), more.end());
    } else if (EQUAL(argument, "--config") && has_value) {
      // --config KEY VALUE, or --config KEY=VALUE (GDAL 3.9)
      i += argv[i + 1].find('=') != std::string::npos ? 1 : 2;
    } else if ((EQUAL(argument, "--debug") || EQUAL(argument, "--locale") ||
                EQUAL(argument, "--mempreload")) &&
               has_value) {
      ++i;
    } else if (!EQUAL(argument, "--pause")) {
      arguments.push_back(argv[i]);
    }
  }
  return arguments;
}

// Whether `argv` is the gdalwarp program's.
bool is_gdalwarp(const std::vector<std::string>& argv) {
  return !argv.empty() && std::string(CPLGetFilename(argv[0].c_str())) == "gdalwarp";
}

// gdalwarp's `options` without those `dropped` says (each with its values).
std::vector<std::string> options_without(
    const std::vector<std::string>& options,
    const std::function<bool(const std::vector<std::string>&, size_t)>& dropped) {
  std::vector<std::string> kept;
  for (size_t i = 0; i < options.size(); ++i) {
    const size_t values = option_value_count(GdalProgram::k_gdalwarp, options, i);
    if (!dropped(options, i)) {
      const size_t end = std::min(options.size(), i + values + 1);
      kept.insert(kept.end(), options.begin() + static_cast<std::ptrdiff_t>(i),
                  options.begin() + static_cast<std::ptrdiff_t>(end));
    }
    i += values;
  }
  return kept;
}

// gdalwarp's command split: its options, sources and destination.
struct GdalwarpCall {
  std::vector<std::string> options;
  std::vector<std::string> sources;
  std::string destination;
};

GdalwarpCall split_gdalwarp_command(const std::vector<std::string>& argv) {
  SplitArguments split =
      split_program_arguments(GdalProgram::k_gdalwarp, without_general_options(argv));
  GdalwarpCall call;
  call.options = std::move(split.options);
  call.sources = std::move(split.positionals);
  if (!call.sources.empty()) {
    call.destination = call.sources.back();
    call.sources.pop_back();
  }
  return call;
}

// The options IDEM's run of GDALWarp() takes: all but -of, -co, -overwrite and -q.
std::vector<std::string> options_to_run(const std::vector<std::string>& options) {
  return options_without(options, [](const std::vector<std::string>& all, size_t i) {
    return is_option(all[i], "-of") || is_option(all[i], "-co") ||
           is_option(all[i], "-overwrite") || is_option(all[i], "-q") ||
           is_option(all[i], "-quiet");
  });
}

// The gdalwarp command this process runs: told by `gdal-idem key` and `gdal-idem pending`, which
// key a gdalwarp command in their own process (each argument URL-escaped), else its own.
std::vector<std::string> command_of_this_process() {
  const char* told = CPLGetConfigOption("IDEM_INTERNAL_GDALWARP_COMMAND", nullptr);
  if (told == nullptr) {
    return arguments_of_this_process();
  }
  std::vector<std::string> argv;
  const CPLStringList words(CSLTokenizeString2(told, " ", CSLT_ALLOWEMPTYTOKENS));
  for (int i = 0; i < words.size(); ++i) {
    int length = 0;
    char* argument = CPLUnescapeString(words[i], &length, CPLES_URL);
    argv.emplace_back(argument, static_cast<size_t>(length));
    CPLFree(argument);
  }
  return argv;
}

}  // namespace

std::unique_ptr<GdalwarpCommand> GdalwarpCommand::of_command(
    const std::vector<std::string>& argv, const std::vector<std::string>& source_names) {
  if (!is_gdalwarp(argv)) {
    return nullptr;
  }
  const GdalwarpCall call = split_gdalwarp_command(argv);
  const std::vector<std::string>& sources = call.sources;
  if (sources != source_names) {
    std::string named;
    for (const std::string& name : sources) {
      named += " " + name;
    }
    throw Error(ErrorKind::k_usage, "the sources on gdalwarp's command line (" +
                                        named.substr(std::min<size_t>(1, named.size())) +
                                        ") are not those of the mosaic it handed IDEM");
  }
  auto mosaic = std::make_unique<GdalwarpCommand>();
  mosaic->m_arguments = options_to_run(call.options);
  return mosaic;
}

std::unique_ptr<GdalwarpCommand> GdalwarpCommand::of_this_process_warping_into(
    const std::string& destination) {
  const std::vector<std::string> argv = command_of_this_process();
  if (!is_gdalwarp(argv)) {
    return nullptr;
  }
  GdalwarpCall call;
  try {
    call = split_gdalwarp_command(argv);
  } catch (const Error& error) {
    CPLDebug(k_debug_category, "gdalwarp's command line cannot be read: %s", error.what());
    return nullptr;
  }
  if (call.sources.empty() || call.destination.empty() ||
      vsiidem_absolute_path(call.destination) != destination) {
    return nullptr;
  }
  auto command = std::make_unique<GdalwarpCommand>();
  command->m_arguments = options_to_run(call.options);
  command->m_source_names = call.sources;
  for (const std::string& value : option_values(GdalProgram::k_gdalwarp, call.options, "-oo")) {
    command->m_open_options.AddString(value.c_str());
  }
  for (const std::string& value : option_values(GdalProgram::k_gdalwarp, call.options, "-if")) {
    command->m_input_drivers.AddString(value.c_str());
  }
  return command;
}

bool GdalwarpCommand::has_option(const char* name) const {
  for (size_t i = 0; i < m_arguments.size(); ++i) {
    if (is_option(m_arguments[i], name)) {
      return true;
    }
    i += option_value_count(GdalProgram::k_gdalwarp, m_arguments, i);
  }
  return false;
}

std::unique_ptr<GdalwarpCommand> GdalwarpCommand::of_this_process(GDALDataset* mosaic,
                                                                  const char* format) {
  const std::vector<std::string> argv = command_of_this_process();
  if (!is_gdalwarp(argv)) {
    // Not gdalwarp: its sources are not looked at. gdal.Warp (or another caller of GDAL's
    // GDALWarp()) handed over the mosaic without its options, which cannot be seen.
    if (called_from_gdalwarp_library()) {
      CPLError(CE_Warning, CPLE_AppDefined,
               "IDEM: GDAL handed IDEM this mosaic of several sources as gdalbuildvrt's VRT, "
               "without the warp's nodata, resampling, warp options and the sources' metadata, "
               "which it applies when it writes %s itself. Build a VRT of the sources first "
               "(gdal.BuildVRT(\"mosaic.vrt\", [...])) and warp it, or give the warp a grid "
               "(outputBounds, xRes/yRes).",
               format);
    }
    return nullptr;
  }
  try {
    return of_command(argv, mosaic_source_names(mosaic));
  } catch (const Error& error) {
    CPLError(CE_Warning, CPLE_AppDefined,
             "IDEM: %s. The mosaic is written from gdalbuildvrt's VRT that gdalwarp made of the "
             "sources, without gdalwarp's nodata, resampling and metadata options "
             "(docs/keys.md, \"Known differences\")",
             error.what());
    return nullptr;
  }
}

std::vector<std::string> GdalwarpCommand::key_arguments() const {
  return options_without(m_arguments, [](const std::vector<std::string>& options, size_t i) {
    return is_option(options[i], "-wm") || is_option(options[i], "-multi") ||
           (is_option(options[i], "-wo") && i + 1 < options.size() &&
            STARTS_WITH_CI(options[i + 1].c_str(), "NUM_THREADS="));
  });
}

bool called_from_gdalwarp_library() {
  constexpr int k_depth = 64;
  void* frames[k_depth];
  const int depth = ::backtrace(frames, k_depth);
  for (int i = 0; i < depth; ++i) {
    Dl_info info{};
    if (::dladdr(frames[i], &info) != 0 && info.dli_sname != nullptr &&
        std::strcmp(info.dli_sname, "GDALWarp") == 0) {
      return true;
    }
  }
  return false;
}

std::vector<std::string> mosaic_source_names(GDALDataset* mosaic) {
  std::vector<std::string> names;
  for (GDALDataset* dataset : band_source_datasets(mosaic->GetRasterBand(1))) {
    names.emplace_back(dataset->GetDescription());
  }
  return names;
}

// gdalbuildvrt stands a proxy for each file (GDALProxyPoolDataset), which does not pass on band
// descriptions: such a source is opened again by its name, with its open options.
std::vector<GDALDataset*> GdalwarpCommand::open_sources(GDALDataset* mosaic) {
  if (!m_sources.empty()) {
    return m_sources;
  }
  if (!m_source_names.empty()) {
    for (const std::string& name : m_source_names) {
      m_opened.emplace_back(GDALDataset::Open(name.c_str(), GDAL_OF_RASTER | GDAL_OF_VERBOSE_ERROR,
                                              m_input_drivers.List(), m_open_options.List(),
                                              nullptr));
      if (!m_opened.back()) {
        throw Error(ErrorKind::k_source,
                    "cannot open the source " + name + ": " + last_gdal_error());
      }
      m_sources.push_back(m_opened.back().get());
    }
    return m_sources;
  }
  std::map<std::string, GDALDataset*> by_name;
  for (GDALDataset* dataset : band_source_datasets(mosaic->GetRasterBand(1))) {
    if (dynamic_cast<GDALProxyDataset*>(dataset) != nullptr) {
      const std::string name = dataset->GetDescription();
      GDALDataset*& opened = by_name[name];
      if (opened == nullptr) {
        m_opened.emplace_back(GDALDataset::Open(name.c_str(),
                                                GDAL_OF_RASTER | GDAL_OF_VERBOSE_ERROR, nullptr,
                                                dataset->GetOpenOptions(), nullptr));
        if (!m_opened.back()) {
          throw Error(ErrorKind::k_source,
                      "cannot open the source " + name + ": " + last_gdal_error());
        }
        opened = m_opened.back().get();
      }
      dataset = opened;
    }
    m_sources.push_back(dataset);
  }
  return m_sources;
}

GDALDatasetUniquePtr run_gdalwarp(const std::vector<GDALDataset*>& sources,
                                  const std::vector<std::string>& arguments, const char* format,
                                  const std::string& path, CSLConstList creation_options,
                                  GDALProgressFunc progress, void* progress_data) {
  CPLStringList argv;
  std::string shown;
  for (const std::string& argument : arguments) {
    argv.AddString(argument.c_str());
    shown += " " + argument;
  }
  argv.AddString("-of");
  argv.AddString(format);
  CPLDebug("IDEM", "as gdalwarp%s -of %s", shown.c_str(), format);
  for (CSLConstList option = creation_options; option != nullptr && *option != nullptr; ++option) {
    argv.AddString("-co");
    argv.AddString(*option);
  }
  GDALWarpAppOptions* options = GDALWarpAppOptionsNew(argv.List(), nullptr);
  if (options == nullptr) {
    throw Error(ErrorKind::k_usage,
                "gdalwarp refused the arguments" + shown + ": " + last_gdal_error());
  }
  GDALWarpAppOptionsSetProgress(options, progress, progress_data);
  std::vector<GDALDatasetH> handles;
  handles.reserve(sources.size());
  for (GDALDataset* source : sources) {
    handles.push_back(GDALDataset::ToHandle(source));
  }
  int usage_error = FALSE;
  CPLErrorReset();
  GDALDatasetH made = GDALWarp(path.c_str(), nullptr, static_cast<int>(handles.size()),
                               handles.data(), options, &usage_error);
  GDALWarpAppOptionsFree(options);
  if (made == nullptr) {
    throw Error(usage_error ? ErrorKind::k_usage : ErrorKind::k_io,
                std::string("the warp (as gdalwarp -of ") + format +
                    " does it) failed: " + last_gdal_error());
  }
  return GDALDatasetUniquePtr(GDALDataset::FromHandle(made));
}

namespace {

// gdalwarp's alpha maximum for a band: from its NBITS (IMAGE_STRUCTURE), else its type's.
std::optional<std::string> alpha_max_of(GDALRasterBand* band) {
  if (band == nullptr) {
    return std::nullopt;
  }
  if (const char* nbits = band->GetMetadataItem("NBITS", "IMAGE_STRUCTURE")) {
    return std::to_string((1ULL << std::atoi(nbits)) - 1ULL);
  }
  if (band->GetRasterDataType() == GDT_Int16) {
    return std::string("32767");
  }
  if (band->GetRasterDataType() == GDT_UInt16) {
    return std::string("65535");
  }
  return std::nullopt;
}

}  // namespace

bool set_destination_alpha_max(GDALWarpOptions& options, GDALDataset* vrt, GDALDataset* output) {
  const int alpha = options.nDstAlphaBand;
  if (alpha <= 0 || alpha > output->GetRasterCount() || alpha > vrt->GetRasterCount()) {
    return false;
  }
  const char* current = CSLFetchNameValue(options.papszWarpOptions, "DST_ALPHA_MAX");
  const std::optional<std::string> of_vrt = alpha_max_of(vrt->GetRasterBand(alpha));
  if (current != nullptr && (!of_vrt || *of_vrt != current)) {
    return false;  // not what the VRT's band gives: chosen with -wo DST_ALPHA_MAX, kept
  }
  const std::optional<std::string> of_output = alpha_max_of(output->GetRasterBand(alpha));
  if (!of_output || (current != nullptr && *of_output == current)) {
    return false;
  }
  options.papszWarpOptions =
      CSLSetNameValue(options.papszWarpOptions, "DST_ALPHA_MAX", of_output->c_str());
  return true;
}

}  // namespace idem
