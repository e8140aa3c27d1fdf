// SPDX-License-Identifier: MIT
// A GDAL program's arguments split into options and positional arguments, by the program's own
// option table (how many values each option takes), never by a parser's error messages: those
// changed when GDAL 3.9 moved the programs to a new argument parser, which also refuses the
// positional arguments that the library functions (GDALWarpAppOptionsNew...) were never meant to
// see. The split is then checked by GDAL's parser: the options alone must be accepted.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace idem {

enum class GdalProgram { k_gdalwarp, k_gdal_translate, k_ogr2ogr };

struct SplitArguments {
  std::vector<std::string> options;      // every option with its values, in order
  std::vector<std::string> positionals;  // the rest, in order (sources, destination, layers)
};

// How many of the tokens after `tokens[i]` (an option, whatever its case) are its values.
// Options GDAL's tables do not know take none (GDAL's parser refuses them afterwards).
size_t option_value_count(GdalProgram program, const std::vector<std::string>& tokens, size_t i);

// Whether `argument` is the option `name` ("-oo") as GDAL's parsers take it: whatever the case
// (-OO), and with two dashes too (GDAL 3.9's parser takes --quiet; it refuses --oo, and so the
// command).
bool is_option(const std::string& argument, const char* name);

// The values of every `name` option (one that takes one value: -oo, -if, -of...) in `options`, in
// order. Other options' values are stepped over as the program's table says, so a value that
// reads like the option ("-mo -oo") is not taken for it.
std::vector<std::string> option_values(GdalProgram program, const std::vector<std::string>& options,
                                       const char* name);

// `tokens` are the arguments after the program's name, once GDALGeneralCmdLineProcessor has
// taken --config and friends. Throws Error(k_usage) with GDAL's message when the options are not
// valid for the program.
SplitArguments split_program_arguments(GdalProgram program, const std::vector<std::string>& tokens);

}  // namespace idem
