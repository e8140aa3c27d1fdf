// gdal-idem: the command-line tool. Dispatches subcommands; turns errors into messages on
// stderr and the documented exit codes.
#include <cstdio>
#include <cstring>
#include <string>

#include "cli.hpp"
#include "core/error.hpp"
#include "core/version.hpp"
#include "cpl_conv.h"
#include "gdal_priv.h"
#include "idem_driver.hpp"

namespace {

constexpr const char* k_usage =
    "Usage: gdal-idem [--ledger DSN] [--json] [-q] COMMAND [ARGS...]\n"
    "\n"
    "Commands:\n"
    "  init [--print]                 create or migrate the ledger schema\n"
    "  key [--json] -- gdalwarp ARGS  the key this gdalwarp / gdal_translate command gets,\n"
    "                                 without running it\n"
    "\n"
    "Global options:\n"
    "  --ledger DSN   sqlite:PATH, postgresql://..., or a libpq keyword string\n"
    "                 (default: IDEM_LEDGER, else ~/.local/state/gdal-idem/ledger.sqlite)\n"
    "  --json         machine-readable output\n"
    "  -q             no progress output\n"
    "  --version      print versions and exit\n"
    "\n"
    "Exit codes: 0 fine, 1 problems found, 2 usage or connection error.\n";

}  // namespace

int main(int argc, char** argv) {
  using namespace idem::cli;
  // The driver is linked in, so `key` works without the plugin installed.
  idem::register_idem_driver();
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
  Args args(argv + i + 1, argv + argc);
  try {
    int rc = k_exit_usage;
    if (command == "key") {
      rc = run_key(args, global);
    } else if (command == "init") {
      rc = run_init(args, global);
    } else {
      std::fprintf(stderr, "gdal-idem: unknown command '%s'\n\n%s", command.c_str(), k_usage);
      return k_exit_usage;
    }
    return rc;
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
