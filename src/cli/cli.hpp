// SPDX-License-Identifier: MIT
// Shared pieces of the gdal-idem command: exit codes, argument access, output helpers.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace idem::cli {

// Documented exit codes (docs/cli.md).
constexpr int k_exit_ok = 0;
constexpr int k_exit_problems =
    1;                           // the command ran and found problems (or the wrapped run failed)
constexpr int k_exit_usage = 2;  // usage error, bad input, a DSN that names no ledger
constexpr int k_exit_unreachable = 3;  // the ledger cannot be reached now: try again later

struct GlobalOptions {
  std::string ledger_dsn;  // --ledger, else IDEM_LEDGER, else the default SQLite file
  bool json = false;       // --json
  bool quiet = false;      // -q
};

// Thrown for bad arguments: main prints "gdal-idem <command>: <message>" (with the nearest of the
// command's options when the message starts "unknown argument '<typed>'") and exits 2.
struct UsageError {
  std::string message;
};

using Args = std::vector<std::string>;

// One function per subcommand, each in its own file (src/cli/<name>_command.cpp).
int run_key(const Args& args, const GlobalOptions& global);
int run_init(const Args& args, const GlobalOptions& global);
int run_status(const Args& args, const GlobalOptions& global);
int run_inflight(const Args& args, const GlobalOptions& global);
int run_reap(const Args& args, const GlobalOptions& global);
int run_verify(const Args& args, const GlobalOptions& global);
int run_explain(const Args& args, const GlobalOptions& global);
int run_forget(const Args& args, const GlobalOptions& global);
int run_prune(const Args& args, const GlobalOptions& global);
int run_export(const Args& args, const GlobalOptions& global);
int run_load(const Args& args, const GlobalOptions& global);
int run_pending(const Args& args, const GlobalOptions& global);

// The key of a gdalwarp or gdal_translate command (`command[0]` the program, then its arguments,
// as the shell passes them), as `gdal-idem key` computes it: GDAL's own parsers, then the
// program's library call in-process against the IDEM driver in dry run (nothing written, no
// output deleted). The command's --config options are set in this process: a caller keying
// several commands scopes them. `before_dry_run`, when set, runs once the command parsed and its
// configuration is in place, before any source is read. Throws UsageError or idem::Error.
struct CommandKey {
  std::string key;
  std::string canonical_json;
  std::string destination;  // absolute real path, as the driver and the ledger name it
};
CommandKey key_raster_command(const Args& command,
                              const std::function<void()>& before_dry_run = {});

}  // namespace idem::cli
