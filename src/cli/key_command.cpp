// SPDX-License-Identifier: MIT
// gdal-idem key -- gdalwarp|gdal_translate ARGS...: the key the command's real run would get.
// The arguments are parsed by GDAL's own option parsers and the program's library call is run
// in-process against the IDEM driver (the plugin, loaded by GDAL as for any program) in dry-run
// mode, so the key is the real run's key; the driver reports it in the returned dataset's
// metadata domain "IDEM".
// gdal-idem key -- ogr2ogr ARGS...: the key `gdal-idem load` gives that feature load.
// key_raster_command() is shared with `gdal-idem pending`, which keys every command of a batch.
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/canonical_json.hpp"
#include "base/error.hpp"
#include "base/held_messages.hpp"
#include "base/paths.hpp"
#include "cli.hpp"
#include "cli_json.hpp"
#include "cli_ledger.hpp"
#include "cpl_conv.h"
#include "cpl_error.h"
#include "cpl_string.h"
#include "gdal_pam.h"
#include "gdal_utils.h"
#include "key/command_line.hpp"
#include "key/feature_key.hpp"
#include "work/target_session.hpp"

namespace idem::cli {

namespace {

// `gdal-idem key --json`'s document: {"destination", "key", "work"}.
void print_key_json(const std::string& destination, const std::string& key,
                    const std::string& canonical_work) {
  std::printf("%s\n", json::object({{"destination", json::str(destination)},
                                    {"key", json::str(key)},
                                    {"work", canonical_work}})
                          .c_str());
}

// The last -of (or ogr2ogr's -f) of the command, as GDAL takes it.
std::string output_format(GdalProgram program, const std::vector<std::string>& options) {
  const std::vector<std::string> formats =
      option_values(program, options, program == GdalProgram::k_ogr2ogr ? "-f" : "-of");
  return formats.empty() ? std::string() : formats.back();
}

struct DatasetCloser {
  void operator()(GDALDatasetH dataset) const {
    if (dataset != nullptr) {
      GDALClose(dataset);
    }
  }
};
using DatasetHandle = std::unique_ptr<void, DatasetCloser>;

// A source opened as the program opens it: with the command's open options (-oo) and, when it
// names some, only the drivers it allows (-if).
DatasetHandle open_source(const std::string& path, GdalProgram program,
                          const std::vector<std::string>& options) {
  CPLStringList open_options;
  for (const auto& option : option_values(program, options, "-oo")) {
    open_options.AddString(option.c_str());
  }
  CPLStringList drivers;
  for (const auto& driver : option_values(program, options, "-if")) {
    drivers.AddString(driver.c_str());
  }
  CPLErrorReset();
  GDALDatasetH dataset = GDALOpenEx(path.c_str(), GDAL_OF_RASTER | GDAL_OF_VERBOSE_ERROR,
                                    drivers.List(), open_options.List(), nullptr);
  if (dataset == nullptr) {
    throw Error(ErrorKind::k_source,
                "cannot open the source " + path + ": " + CPLGetLastErrorMsg());
  }
  // A dry run writes nothing anywhere: what the command computes on its source (gdal_translate
  // -stats) is not saved beside it (a .aux.xml) when the source is closed.
  if (auto* pam = dynamic_cast<GDALPamDataset*>(GDALDataset::FromHandle(dataset))) {
    pam->SetPamFlags(pam->GetPamFlags() | GPF_NOSAVE);
  }
  return DatasetHandle(dataset);
}

// The destination as IDEM sees it, always through /vsiidem/ so that GDAL's pre-delete is
// deferred (and cancelled by the dry run): a dry run never deletes an existing output.
std::string dry_run_destination(const std::string& destination) {
  if (is_vsiidem_path(destination)) {
    return destination;
  }
  return std::string(k_vsiidem_prefix) + absolute_path(destination);
}

// The driver's dry-run report, from the metadata domain "IDEM" of the dataset it returned.
std::optional<CommandKey> dry_run_report(GDALDatasetH dataset) {
  if (dataset == nullptr) {
    return std::nullopt;
  }
  const char* key = GDALGetMetadataItem(dataset, "KEY", "IDEM");
  const char* work = GDALGetMetadataItem(dataset, "WORK", "IDEM");
  const char* destination = GDALGetMetadataItem(dataset, "DESTINATION", "IDEM");
  if (key == nullptr || work == nullptr || destination == nullptr) {
    return std::nullopt;
  }
  return CommandKey{key, work, destination};
}

// GDAL has no IDEM driver: it loads drivers from plugins, and did not find gdal_IDEM.so.
void require_idem_driver() {
  if (GDALGetDriverByName("IDEM") != nullptr) {
    return;
  }
  const char* driver_path = CPLGetConfigOption("GDAL_DRIVER_PATH", nullptr);
  throw Error(ErrorKind::k_usage,
              std::string("GDAL did not load the IDEM driver (gdal_IDEM.so) from ") +
                  (driver_path != nullptr ? "GDAL_DRIVER_PATH=" + std::string(driver_path)
                                          : std::string("its plugin directory")) +
                  ": install gdal-idem's plugin there, or set GDAL_DRIVER_PATH to the directory "
                  "that holds gdal_IDEM.so");
}

constexpr const char* k_key_usage =
    "usage: gdal-idem key [--json] -- gdalwarp|gdal_translate ARGS...\n"
    "       gdal-idem key [--json] [--mode replace|append] [--namespace N] -- ogr2ogr ARGS...";

// `key -- ogr2ogr ...`: the key `gdal-idem load` would give this command (nothing is written;
// the bundle is read to identify it by content, and the target's server is asked for its
// current schema when the command names none, as `load` asks it).
int run_key_ogr2ogr(const Args& arguments, FeatureLoadSettings settings,
                    const std::optional<std::string>& namespace_name, bool json) {
  const Ogr2ogrCommand command = parse_ogr2ogr_command(arguments);
  settings.namespace_name =
      namespace_name.value_or(CPLGetConfigOption("IDEM_NAMESPACE", "default"));
  settings.digest_policy = source_digest_policy_from_config();
  InMemoryDigestCache cache;
  settings.digest_cache = &cache;
  settings.current_schema = ask_current_schema;
  const FeatureWork work = describe_feature_load(command, settings);
  if (json) {
    print_key_json(work.output_uri, work.key, work.canonical_json);
  } else {
    std::printf("%s\n", work.key.c_str());
  }
  return k_exit_ok;
}

}  // namespace

int run_key(const Args& args, const GlobalOptions& global) {
  bool json = global.json;
  FeatureLoadSettings load_settings;  // ogr2ogr only: --mode, --namespace as for `load`
  std::optional<std::string> load_namespace;
  bool load_options_given = false;
  size_t i = 0;
  for (; i < args.size() && args[i] != "--"; ++i) {
    if (args[i] == "--json") {
      json = true;
    } else if (args[i] == "--mode" && i + 1 < args.size()) {
      load_settings.mode = parse_load_mode(args[++i]);
      load_options_given = true;
    } else if (args[i] == "--namespace" && i + 1 < args.size()) {
      load_namespace = label_argument("--namespace", args[++i]);
      load_options_given = true;
    } else {
      throw UsageError{"unknown option '" + args[i] + "'; " + k_key_usage};
    }
  }
  if (i + 1 >= args.size()) {
    throw UsageError{k_key_usage};
  }
  const std::string program_name = basename_of(args[i + 1]);
  if (program_name == "ogr2ogr") {
    return run_key_ogr2ogr(Args(args.begin() + static_cast<long>(i) + 2, args.end()), load_settings,
                           load_namespace, json);
  }
  if (load_options_given) {
    throw UsageError{
        "--mode and --namespace are for ogr2ogr loads; gdalwarp and gdal_translate "
        "take -co NAMESPACE="};
  }
  if (program_name != "gdalwarp" && program_name != "gdal_translate") {
    throw UsageError{"'" + program_name + "' is not gdalwarp, gdal_translate or ogr2ogr"};
  }
  const CommandKey key =
      key_raster_command(Args(args.begin() + static_cast<long>(i) + 1, args.end()));
  if (json) {
    print_key_json(key.destination, key.key, key.canonical_json);
  } else {
    std::printf("%s\n", key.key.c_str());
  }
  return k_exit_ok;
}

CommandKey key_raster_command(const Args& command, const std::function<void()>& before_dry_run) {
  if (command.empty()) {
    throw UsageError{"no command"};
  }
  const std::string program_name = basename_of(command[0]);
  GdalProgram program;
  if (program_name == "gdalwarp") {
    program = GdalProgram::k_gdalwarp;
  } else if (program_name == "gdal_translate") {
    program = GdalProgram::k_gdal_translate;
  } else {
    throw UsageError{"'" + program_name + "' is not gdalwarp or gdal_translate"};
  }

  // --config, --debug and friends, handled as the programs do.
  CPLStringList argv;
  argv.AddString(program_name.c_str());
  for (size_t j = 1; j < command.size(); ++j) {
    argv.AddString(command[j].c_str());
  }
  char** raw = argv.StealList();
  const int argc = GDALGeneralCmdLineProcessor(CSLCount(raw), &raw, 0);
  CPLStringList processed(raw, TRUE);
  if (argc < 1) {
    throw UsageError{"the command's general options are invalid"};
  }
  std::vector<std::string> tokens;
  for (int j = 1; j < argc; ++j) {
    tokens.emplace_back(processed[j]);
  }

  SplitArguments parsed = split_program_arguments(program, tokens);
  if (CPLString(output_format(program, parsed.options)).toupper() != "IDEM") {
    throw UsageError{
        "the command does not write through IDEM: add -of IDEM (and write the "
        "output as /vsiidem/PATH)"};
  }
  const size_t expected_min = 2;
  if (parsed.positionals.size() < expected_min ||
      (program == GdalProgram::k_gdal_translate && parsed.positionals.size() != 2)) {
    throw UsageError{"the command needs a source and a destination"};
  }
  const std::string destination = dry_run_destination(parsed.positionals.back());
  parsed.positionals.pop_back();
  require_idem_driver();
  if (before_dry_run) {
    before_dry_run();
  }

  CPLConfigOptionSetter dry_run("IDEM_DRY_RUN", "YES", false);
  // The driver reads gdalwarp's command line where the process is gdalwarp (for a plain mosaic,
  // docs/internals.md §12); here it is told the command, each argument URL-escaped.
  std::string escaped_command;
  for (const auto& argument : command) {
    char* escaped = CPLEscapeString(argument.c_str(), -1, CPLES_URL);
    escaped_command += (escaped_command.empty() ? "" : " ") + std::string(escaped);
    CPLFree(escaped);
  }
  CPLConfigOptionSetter gdalwarp_command(
      "IDEM_INTERNAL_GDALWARP_COMMAND",
      program == GdalProgram::k_gdalwarp ? escaped_command.c_str() : nullptr, true);
  // The driver's notice of the dry run is this command's result; other messages pass.
  HeldMessages held;
  std::optional<CommandKey> report;

  int usage_error = FALSE;
  GDALDatasetH result = nullptr;
  CPLStringList option_list;
  for (const auto& option : parsed.options) {
    option_list.AddString(option.c_str());
  }
  CPLErrorReset();
  if (program == GdalProgram::k_gdalwarp) {
    std::vector<DatasetHandle> sources;
    std::vector<GDALDatasetH> handles;
    for (const auto& path : parsed.positionals) {
      sources.push_back(open_source(path, program, parsed.options));
      handles.push_back(sources.back().get());
    }
    GDALWarpAppOptions* options = GDALWarpAppOptionsNew(option_list.List(), nullptr);
    result = GDALWarp(destination.c_str(), nullptr, static_cast<int>(handles.size()),
                      handles.data(), options, &usage_error);
    GDALWarpAppOptionsFree(options);
  } else {
    DatasetHandle source = open_source(parsed.positionals[0], program, parsed.options);
    GDALTranslateOptions* options = GDALTranslateOptionsNew(option_list.List(), nullptr);
    result = GDALTranslate(destination.c_str(), source.get(), options, &usage_error);
    GDALTranslateOptionsFree(options);
  }
  report = dry_run_report(result);
  if (result != nullptr) {
    GDALClose(result);
  }
  held.replay([](CPLErr type, const std::string& message) {
    return type == CE_Warning && message.rfind("IDEM dry run: ", 0) == 0;
  });
  if (!report) {
    const std::string message = CPLGetLastErrorMsg();
    throw Error(usage_error ? ErrorKind::k_usage : ErrorKind::k_source,
                "the command did not reach the IDEM driver" +
                    (message.empty() ? std::string() : ": " + message));
  }
  return *report;
}

}  // namespace idem::cli
