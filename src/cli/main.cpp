// SPDX-License-Identifier: MIT
// gdal-idem: the command-line tool. Parses the command line (command_table.hpp), runs the
// subcommand, and turns errors into a message on stderr, the documented exit code and, with
// --json, an error object on stdout.
#include <cstdio>
#include <string>

#include "base/error.hpp"
#include "base/version.hpp"
#include "cli.hpp"
#include "cli_json.hpp"
#include "command_table.hpp"
#include "cpl_conv.h"
#include "gdal_priv.h"

namespace {

using idem::cli::Command;
using idem::cli::CommandLine;

// The exit code of a failure of `kind` (error_kind_name): 2 for what the user must change (the
// command, a DSN that names no ledger or a file that is not one, a ledger of a newer release), 3
// for a ledger that cannot be reached now (try again later), 1 for the rest (the command ran and
// failed).
int exit_code_of(const std::string& kind) {
  if (kind == "usage" || kind == "refused_destination" || kind == "ledger") {
    return idem::cli::k_exit_usage;
  }
  if (kind == "ledger_unreachable") {
    return idem::cli::k_exit_unreachable;
  }
  return idem::cli::k_exit_problems;
}

// The failure said: "gdal-idem COMMAND: MESSAGE" on stderr and, with --json, {"error": {"kind",
// "message"}} on stdout (the Python package reads its kind). Its exit code.
int fail(const CommandLine& line, const std::string& kind, const std::string& message) {
  std::fprintf(stderr, "gdal-idem%s%s: %s\n", line.command.empty() ? "" : " ", line.command.c_str(),
               message.c_str());
  if (line.global.json) {
    namespace json = idem::cli::json;
    std::printf("%s\n", json::object({{"error", json::object({{"kind", json::str(kind)},
                                                              {"message", json::str(message)}})}})
                            .c_str());
  }
  return exit_code_of(kind);
}

int run(const Command& command, const CommandLine& line) {
  try {
    return command.run(line.args, line.global);
  } catch (const idem::cli::UsageError& error) {
    // An unknown option named: the nearest of the command's, if one is near.
    std::string message = error.message;
    const std::string prefix = "unknown argument '";
    if (message.rfind(prefix, 0) == 0) {
      const size_t end = message.find('\'', prefix.size());
      if (end != std::string::npos) {
        const std::string typed = message.substr(prefix.size(), end - prefix.size());
        message.insert(end + 1, idem::cli::did_you_mean(typed, &command));
      }
    }
    return fail(line, "usage", message);
  } catch (const idem::Error& error) {
    return fail(line, idem::error_kind_name(error), error.what());
  } catch (const std::exception& error) {
    return fail(line, "internal", std::string("unexpected error: ") + error.what());
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace idem::cli;
  // The IDEM driver is a plugin, loaded as any GDAL program loads it (GDAL_DRIVER_PATH, else
  // GDAL's plugin directory); `key` and `pending` say so when it is missing.
  GDALAllRegister();

  GlobalOptions defaults;
  defaults.ledger_dsn = CPLGetConfigOption("IDEM_LEDGER", "");
  CommandLine line;
  try {
    line = parse_command_line(Args(argv + 1, argv + argc), defaults);
  } catch (const UsageError& error) {
    line.global = defaults;
    return fail(line, "usage", error.message);
  }
  if (line.version) {
    std::printf("gdal-idem %s (%s)\n", idem::idem_version().c_str(),
                idem::library_versions().c_str());
    return k_exit_ok;
  }
  const Command* command = line.command.empty() ? nullptr : find_command(line.command);
  if (line.help && (command != nullptr || line.command.empty())) {
    std::fputs(command != nullptr ? command_help(*command).c_str() : usage_text().c_str(), stdout);
    return k_exit_ok;
  }
  if (line.command.empty()) {
    std::fputs(usage_text().c_str(), stderr);
    return k_exit_usage;
  }
  if (command == nullptr) {
    const std::string message = "unknown command '" + line.command + "'" +
                                did_you_mean(line.command) + "; gdal-idem --help lists them";
    const int code = fail(CommandLine{line.global, "", {}, false, false}, "usage", message);
    std::fputs(("\n" + usage_text()).c_str(), stderr);
    return code;
  }
  return run(*command, line);
}
