// SPDX-License-Identifier: MIT
// The option tables of gdalwarp, gdal_translate and ogr2ogr (GDAL 3.6 to 3.13: the union, since
// an option a GDAL does not know is refused by that GDAL's parser anyway).
#include "key/command_line.hpp"

#include <map>
#include <string_view>

#include "base/error.hpp"
#include "cpl_conv.h"
#include "cpl_error.h"
#include "cpl_string.h"
#include "gdal_utils.h"

namespace idem {

namespace {

bool numeric(const std::vector<std::string>& tokens, size_t i) {
  return i < tokens.size() && CPLGetValueType(tokens[i].c_str()) != CPL_VALUE_STRING;
}

// Options with a fixed number of values; everything not listed (and not handled below) is a flag.
const std::map<std::string_view, size_t>& fixed_counts(GdalProgram program) {
  static const std::map<std::string_view, size_t> k_warp = {{"-b", 1},
                                                            {"-srcband", 1},
                                                            {"-dstband", 1},
                                                            {"-s_srs", 1},
                                                            {"-t_srs", 1},
                                                            {"-ct", 1},
                                                            {"-to", 1},
                                                            {"-s_coord_epoch", 1},
                                                            {"-t_coord_epoch", 1},
                                                            {"-order", 1},
                                                            {"-et", 1},
                                                            {"-te", 4},
                                                            {"-te_srs", 1},
                                                            {"-ts", 2},
                                                            {"-ovr", 1},
                                                            {"-wo", 1},
                                                            {"-ot", 1},
                                                            {"-wt", 1},
                                                            {"-r", 1},
                                                            {"-srcnodata", 1},
                                                            {"-dstnodata", 1},
                                                            {"-wm", 1},
                                                            {"-cutline", 1},
                                                            {"-cutline_srs", 1},
                                                            {"-cl", 1},
                                                            {"-cwhere", 1},
                                                            {"-csql", 1},
                                                            {"-cblend", 1},
                                                            {"-cvmd", 1},
                                                            {"-oo", 1},
                                                            {"-doo", 1},
                                                            {"-of", 1},
                                                            {"-f", 1},
                                                            {"-co", 1},
                                                            {"-if", 1}};
  static const std::map<std::string_view, size_t> k_translate = {{"-ot", 1},
                                                                 {"-if", 1},
                                                                 {"-of", 1},
                                                                 {"-f", 1},
                                                                 {"-b", 1},
                                                                 {"-mask", 1},
                                                                 {"-expand", 1},
                                                                 {"-outsize", 2},
                                                                 {"-tr", 2},
                                                                 {"-ovr", 1},
                                                                 {"-r", 1},
                                                                 {"-exponent", 1},
                                                                 {"-srcwin", 4},
                                                                 {"-projwin", 4},
                                                                 {"-projwin_srs", 1},
                                                                 {"-a_srs", 1},
                                                                 {"-a_coord_epoch", 1},
                                                                 {"-a_ullr", 4},
                                                                 {"-a_gt", 6},
                                                                 {"-a_ulurll", 6},
                                                                 {"-a_nodata", 1},
                                                                 {"-a_scale", 1},
                                                                 {"-a_offset", 1},
                                                                 {"-colorinterp", 1},
                                                                 {"-mo", 1},
                                                                 {"-dmo", 1},
                                                                 {"-co", 1},
                                                                 {"-oo", 1},
                                                                 {"-limit", 1}};
  static const std::map<std::string_view, size_t> k_ogr2ogr = {{"-f", 1},
                                                               {"-of", 1},
                                                               {"-dsco", 1},
                                                               {"-lco", 1},
                                                               {"-oo", 1},
                                                               {"-doo", 1},
                                                               {"-nln", 1},
                                                               {"-nlt", 1},
                                                               {"-dim", 1},
                                                               {"-a_srs", 1},
                                                               {"-t_srs", 1},
                                                               {"-s_srs", 1},
                                                               {"-ct", 1},
                                                               {"-spat", 4},
                                                               {"-spat_srs", 1},
                                                               {"-geomfield", 1},
                                                               {"-where", 1},
                                                               {"-sql", 1},
                                                               {"-dialect", 1},
                                                               {"-select", 1},
                                                               {"-gt", 1},
                                                               {"-fid", 1},
                                                               {"-limit", 1},
                                                               {"-segmentize", 1},
                                                               {"-simplify", 1},
                                                               {"-fieldTypeToString", 1},
                                                               {"-mapFieldType", 1},
                                                               {"-fieldmap", 1},
                                                               {"-zfield", 1},
                                                               {"-order", 1},
                                                               {"-clipsrcsql", 1},
                                                               {"-clipsrclayer", 1},
                                                               {"-clipsrcwhere", 1},
                                                               {"-clipdstsql", 1},
                                                               {"-clipdstlayer", 1},
                                                               {"-clipdstwhere", 1},
                                                               {"-datelineoffset", 1},
                                                               {"-mo", 1},
                                                               {"-a_coord_epoch", 1},
                                                               {"-s_coord_epoch", 1},
                                                               {"-t_coord_epoch", 1},
                                                               {"-xyRes", 1},
                                                               {"-zRes", 1},
                                                               {"-mRes", 1},
                                                               {"-if", 1}};
  switch (program) {
    case GdalProgram::k_gdalwarp:
      return k_warp;
    case GdalProgram::k_gdal_translate:
      return k_translate;
    case GdalProgram::k_ogr2ogr:
      break;
  }
  return k_ogr2ogr;
}

// Up to `most` numeric values, taken in pairs: -scale [src_min src_max [dst_min dst_max]].
size_t numeric_pairs(const std::vector<std::string>& tokens, size_t i, size_t most) {
  size_t count = 0;
  while (count < most && numeric(tokens, i + 1 + count) && numeric(tokens, i + 2 + count)) {
    count += 2;
  }
  return count;
}

}  // namespace

bool is_option(const std::string& argument, const char* name) {
  return EQUAL(argument.c_str(), name) || (argument.size() > 2 && argument[0] == '-' &&
                                           argument[1] == '-' && EQUAL(argument.c_str() + 1, name));
}

std::vector<std::string> option_values(GdalProgram program, const std::vector<std::string>& options,
                                       const char* name) {
  std::vector<std::string> values;
  for (size_t i = 0; i < options.size(); ++i) {
    const size_t count = option_value_count(program, options, i);
    if (count >= 1 && i + 1 < options.size() && is_option(options[i], name)) {
      values.push_back(options[i + 1]);
    }
    i += count;
  }
  return values;
}

size_t option_value_count(GdalProgram program, const std::vector<std::string>& tokens, size_t i) {
  // GDAL's parsers take options whatever their case (-OO, -TR), 3.6 to 3.13.
  const std::string option = CPLString(tokens[i]).tolower();
  switch (program) {
    case GdalProgram::k_gdalwarp:
      if (option == "-tr") {  // -tr xres yres, or -tr square (3.8)
        return i + 1 < tokens.size() && tokens[i + 1] == "square" ? 1 : 2;
      }
      if (option == "-refine_gcps") {  // tolerance [minimum_gcps]
        return numeric(tokens, i + 2) ? 2 : 1;
      }
      break;
    case GdalProgram::k_gdal_translate:
      if (option == "-scale" || STARTS_WITH(option.c_str(), "-scale_")) {
        return numeric_pairs(tokens, i, 4);
      }
      if (STARTS_WITH(option.c_str(), "-exponent_") ||
          STARTS_WITH(option.c_str(), "-colorinterp_")) {
        return 1;
      }
      if (option == "-gcp") {  // pixel line easting northing [elevation]
        return numeric(tokens, i + 5) ? 5 : 4;
      }
      break;
    case GdalProgram::k_ogr2ogr:
      if (option == "-clipsrc" || option == "-clipdst") {  // xmin ymin xmax ymax, or one value
        return numeric(tokens, i + 1) ? 4 : 1;
      }
      if (option == "-gcp") {
        return numeric(tokens, i + 5) ? 5 : 4;
      }
      break;
  }
  const auto& counts = fixed_counts(program);
  const auto found = counts.find(option);
  return found == counts.end() ? 0 : found->second;
}

namespace {

// GDAL's parser's verdict on options without positional arguments: empty when accepted.
std::string refusal(GdalProgram program, const std::vector<std::string>& options) {
  CPLStringList list;
  for (const auto& option : options) {
    list.AddString(option.c_str());
  }
  CPLErrorReset();
  CPLErrorHandlerPusher quiet(CPLQuietErrorHandler);
  bool accepted = false;
  switch (program) {
    case GdalProgram::k_gdalwarp: {
      GDALWarpAppOptions* parsed = GDALWarpAppOptionsNew(list.List(), nullptr);
      accepted = parsed != nullptr;
      GDALWarpAppOptionsFree(parsed);
      break;
    }
    case GdalProgram::k_gdal_translate: {
      GDALTranslateOptions* parsed = GDALTranslateOptionsNew(list.List(), nullptr);
      accepted = parsed != nullptr;
      GDALTranslateOptionsFree(parsed);
      break;
    }
    case GdalProgram::k_ogr2ogr: {
      GDALVectorTranslateOptions* parsed = GDALVectorTranslateOptionsNew(list.List(), nullptr);
      accepted = parsed != nullptr;
      GDALVectorTranslateOptionsFree(parsed);
      break;
    }
  }
  if (accepted) {
    return {};
  }
  const std::string message = CPLGetLastErrorMsg();
  return message.empty() ? std::string("refused by GDAL's parser") : message;
}

}  // namespace

SplitArguments split_program_arguments(GdalProgram program,
                                       const std::vector<std::string>& tokens) {
  SplitArguments split;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& token = tokens[i];
    if (token.size() < 2 || token[0] != '-') {
      split.positionals.push_back(token);
      continue;
    }
    const size_t values = option_value_count(program, tokens, i);
    if (i + values >= tokens.size()) {
      throw Error(ErrorKind::k_usage,
                  "the option " + token + " needs " + std::to_string(values) + " value(s)");
    }
    for (size_t j = 0; j <= values; ++j) {
      split.options.push_back(tokens[i + j]);
    }
    i += values;
  }
  const std::string refused = refusal(program, split.options);
  if (!refused.empty()) {
    throw Error(ErrorKind::k_usage, "the command's options are invalid: " + refused);
  }
  return split;
}

}  // namespace idem
