// SPDX-License-Identifier: MIT
// split_program_arguments: options and positional arguments as the programs read them, without
// asking GDAL's parser which token is which (its messages and its handling of positional
// arguments changed in GDAL 3.9).
#include "key/command_line.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.hpp"
#include "gdal_priv.h"

namespace idem {
namespace {

using Tokens = std::vector<std::string>;

SplitArguments split(GdalProgram program, const Tokens& tokens) {
  GDALAllRegister();
  return split_program_arguments(program, tokens);
}

TEST(CommandLine, WarpValuesThatLookLikeOptionsOrFilesStayWithTheirOption) {
  const SplitArguments parsed =
      split(GdalProgram::k_gdalwarp,
            {"-of", "IDEM", "-te", "-180", "-90", "180", "90", "-ts", "10", "10", "-srcnodata",
             "-9999", "-co", "FORMAT=GTiff", "a.tif", "-r", "cubic", "b.tif", "/vsiidem/out.tif"});
  EXPECT_EQ(parsed.positionals, (Tokens{"a.tif", "b.tif", "/vsiidem/out.tif"}));
  EXPECT_EQ(parsed.options,
            (Tokens{"-of", "IDEM", "-te", "-180", "-90", "180", "90", "-ts", "10", "10",
                    "-srcnodata", "-9999", "-co", "FORMAT=GTiff", "-r", "cubic"}));
}

TEST(CommandLine, OptionValuesAreTakenAsGdalTakesThem) {
  // Whatever the case; a value that reads like the option is another option's value.
  EXPECT_EQ(option_values(GdalProgram::k_gdal_translate,
                          {"-mo", "-oo", "-OO", "A=1", "-Mo", "-oo", "-oo", "C=3"}, "-oo"),
            (Tokens{"A=1", "C=3"}));
  EXPECT_EQ(option_values(GdalProgram::k_gdalwarp,
                          {"-te", "1", "2", "3", "4", "-if", "GTiff", "-of", "IDEM"}, "-if"),
            (Tokens{"GTiff"}));
  EXPECT_EQ(option_values(GdalProgram::k_ogr2ogr, {"-lco", "SCHEMA=x", "-nln", "-lco"}, "-lco"),
            (Tokens{"SCHEMA=x"}));
  EXPECT_TRUE(option_values(GdalProgram::k_gdalwarp, {"-oo"}, "-oo").empty());
}

TEST(CommandLine, OptionsAreTakenWhateverTheirCase) {
  const SplitArguments parsed =
      split(GdalProgram::k_gdalwarp, {"-TR", "10", "10", "-OF", "IDEM", "a.tif", "b.tif"});
  EXPECT_EQ(parsed.positionals, (Tokens{"a.tif", "b.tif"}));
}

TEST(CommandLine, WarpRefineGcpsTakesAnOptionalSecondValue) {
  EXPECT_EQ(
      split(GdalProgram::k_gdalwarp, {"-refine_gcps", "0.5", "10", "a.tif", "b.tif"}).positionals,
      (Tokens{"a.tif", "b.tif"}));
  EXPECT_EQ(split(GdalProgram::k_gdalwarp, {"-refine_gcps", "0.5", "a.tif", "b.tif"}).positionals,
            (Tokens{"a.tif", "b.tif"}));
}

TEST(CommandLine, TranslateScaleTakesZeroTwoOrFourNumbers) {
  EXPECT_EQ(split(GdalProgram::k_gdal_translate, {"-scale", "in.tif", "out.tif"}).positionals,
            (Tokens{"in.tif", "out.tif"}));
  EXPECT_EQ(
      split(GdalProgram::k_gdal_translate, {"-scale", "0", "255", "in.tif", "out.tif"}).positionals,
      (Tokens{"in.tif", "out.tif"}));
  EXPECT_EQ(split(GdalProgram::k_gdal_translate,
                  {"-scale_1", "0", "255", "0", "1", "-b", "1", "in.tif", "out.tif"})
                .options,
            (Tokens{"-scale_1", "0", "255", "0", "1", "-b", "1"}));
}

TEST(CommandLine, TranslateGcpTakesAnOptionalElevation) {
  EXPECT_EQ(split(GdalProgram::k_gdal_translate, {"-gcp", "0", "0", "10", "20", "-gcp", "5", "5",
                                                  "15", "25", "100", "in.tif", "out.tif"})
                .positionals,
            (Tokens{"in.tif", "out.tif"}));
}

TEST(CommandLine, Ogr2ogrDestinationSourceAndLayers) {
  const SplitArguments parsed =
      split(GdalProgram::k_ogr2ogr, {"-f", "GPKG", "-nln", "roads", "out.gpkg", "in.gpkg",
                                     "layer_a", "-spat", "0", "0", "10", "10", "layer_b"});
  EXPECT_EQ(parsed.positionals, (Tokens{"out.gpkg", "in.gpkg", "layer_a", "layer_b"}));
}

TEST(CommandLine, AnOptionWithoutItsValuesIsAUsageError) {
  try {
    split(GdalProgram::k_gdalwarp, {"a.tif", "b.tif", "-te", "1", "2", "3"});
    FAIL() << "accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::k_usage);
    EXPECT_NE(std::string(error.what()).find("-te"), std::string::npos);
  }
}

TEST(CommandLine, AnOptionGdalDoesNotKnowIsRefusedByGdal) {
  EXPECT_THROW(split(GdalProgram::k_gdalwarp, {"-no-such-option", "a.tif", "b.tif"}), Error);
}

}  // namespace
}  // namespace idem
