// SPDX-License-Identifier: MIT
// gdal-idem: the command-line tool. Dispatches subcommands; turns errors into messages on
// stderr and the documented exit codes.
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "base/error.hpp"
#include "base/version.hpp"
#include "cli.hpp"
#include "cpl_conv.h"
#include "gdal_priv.h"

namespace {

constexpr const char* k_usage =
    "Usage: gdal-idem [--ledger DSN] [--json] [-q] COMMAND [ARGS...]\n"
    "\n"
    "Commands:\n"
    "  init [--print]                 create or migrate the ledger schema\n"
    "  key [--json] [--mode replace|append] [--namespace N] "
    "-- gdalwarp|gdal_translate|ogr2ogr ARGS\n"
    "                                 the key this command gets, without running it\n"
    "                                 (--mode, --namespace: for ogr2ogr, as with load)\n"
    "  status [--namespace N] [--layer L]\n"
    "                                 completed / in flight / stale / superseded counts\n"
    "  inflight [--all] [--namespace N] [--layer L]\n"
    "                                 claims whose lease expired (--all: every claim)\n"
    "  reap [--older-than D] [--dry-run] [--requeue] [--namespace N] [--all-dirs]\n"
    "                                 release stale claims, remove orphan .idem-tmp-* dirs\n"
    "  verify [--namespace N] [--layer L] [--checksum] [--dry-run]\n"
    "                                 check completed outputs; drop the rows of bad ones\n"
    "  explain KEY_A KEY_B | --last OUTPUT\n"
    "                                 why was this rebuilt: diff of two work descriptions\n"
    "  forget KEY | --output URI | --namespace N [--layer L] [--delete-output]\n"
    "                                 delete ledger rows (then, optionally, the outputs)\n"
    "  prune --keep-latest | --older-than D [--drop-history D] [--namespace N] [--force]\n"
    "                                 move completed rows into history, drop old history\n"
    "  export OUT.gpkg|OUT.geojson [--namespace N] [--layer L]\n"
    "                                 the ledger as a vector layer with tile footprints\n"
    "         or: export --format stac DIR [--namespace N] [--layer L]\n"
    "                                 the completed outputs as a static STAC catalog\n"
    "  load [--mode replace|append] [--namespace N] -- ogr2ogr ARGS\n"
    "                                 an idempotent ogr2ogr load into PostgreSQL/PostGIS\n"
    "  pending [--null] [--count] [FILE|-]\n"
    "                                 the batch's command lines whose work is not done\n"
    "\n"
    "Global options:\n"
    "  --ledger DSN   sqlite:PATH, postgresql://..., or a libpq keyword string\n"
    "                 (default: IDEM_LEDGER, else ~/.local/state/gdal-idem/ledger.sqlite)\n"
    "  --json         machine-readable output\n"
    "  -q             no progress output\n"
    "  --version      print versions and exit\n"
    "\n"
    "Durations: 90s, 15m, 2h, 7d or plain seconds.\n"
    "Exit codes: 0 fine, 1 problems found, 2 usage or connection error.\n";

// The global options may also follow the command's name, as users type them
// (`gdal-idem status --json`): taken out of the command's arguments up to a "--", after which
// everything belongs to the wrapped command.
idem::cli::Args take_global_options(const idem::cli::Args& args, idem::cli::GlobalOptions& global) {
  idem::cli::Args rest;
  bool wrapped = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (wrapped || arg == "--") {
      wrapped = true;
      rest.push_back(arg);
    } else if (arg == "--ledger") {
      if (i + 1 >= args.size()) {
        throw idem::cli::UsageError{"--ledger needs a DSN (sqlite:PATH, postgresql://...)"};
      }
      global.ledger_dsn = args[++i];
    } else if (arg == "--json") {
      global.json = true;
    } else if (arg == "-q" || arg == "--quiet") {
      global.quiet = true;
    } else {
      rest.push_back(arg);
    }
  }
  return rest;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace idem::cli;
  // The IDEM driver is a plugin, loaded as any GDAL program loads it (GDAL_DRIVER_PATH, else
  // GDAL's plugin directory); `key` and `pending` say so when it is missing.
  GDALAllRegister();

  GlobalOptions global;
  global.ledger_dsn = CPLGetConfigOption("IDEM_LEDGER", "");
  int i = 1;
  for (; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--ledger" && i + 1 < argc) {
      global.ledger_dsn = argv[++i];
    } else if (arg == "--json") {
      global.json = true;
    } else if (arg == "-q" || arg == "--quiet") {
      global.quiet = true;
    } else if (arg == "--version") {
      std::printf("gdal-idem %s (%s)\n", idem::idem_version().c_str(),
                  idem::library_versions().c_str());
      return k_exit_ok;
    } else if (arg == "-h" || arg == "--help" || arg == "help") {
      std::fputs(k_usage, stdout);
      return k_exit_ok;
    } else {
      break;
    }
  }
  if (i >= argc) {
    std::fputs(k_usage, stderr);
    return k_exit_usage;
  }
  const std::string command = argv[i];
  Args args;
  try {
    args = take_global_options(Args(argv + i + 1, argv + argc), global);
    using Runner = int (*)(const Args&, const GlobalOptions&);
    static const std::map<std::string, Runner> k_commands = {
        {"init", run_init},         {"key", run_key},       {"status", run_status},
        {"inflight", run_inflight}, {"reap", run_reap},     {"verify", run_verify},
        {"explain", run_explain},   {"forget", run_forget}, {"prune", run_prune},
        {"export", run_export},     {"load", run_load},     {"pending", run_pending},
    };
    const auto found = k_commands.find(command);
    if (found == k_commands.end()) {
      std::fprintf(stderr, "gdal-idem: unknown command '%s'\n\n%s", command.c_str(), k_usage);
      return k_exit_usage;
    }
    return found->second(args, global);
  } catch (const UsageError& error) {
    std::fprintf(stderr, "gdal-idem %s: %s\n", command.c_str(), error.message.c_str());
    return k_exit_usage;
  } catch (const idem::Error& error) {
    std::fprintf(stderr, "gdal-idem %s: %s\n", command.c_str(), error.what());
    return error.kind() == idem::ErrorKind::k_usage || error.kind() == idem::ErrorKind::k_ledger
               ? k_exit_usage
               : k_exit_problems;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "gdal-idem %s: unexpected error: %s\n", command.c_str(), error.what());
    return k_exit_problems;
  }
}
