// SPDX-License-Identifier: MIT
// gdal-idem init [--print]: create or migrate the ledger schema (safe to run again), or print
// the SQL it would apply.
#include <cstdio>

#include "cli.hpp"
#include "cli_json.hpp"
#include "ledger/ledger.hpp"

namespace idem::cli {

int run_init(const Args& args, const GlobalOptions& global) {
  bool print = false;
  for (const auto& arg : args) {
    if (arg == "--print") {
      print = true;
    } else {
      throw UsageError{"unknown argument '" + arg + "'; usage: gdal-idem init [--print]"};
    }
  }
  const std::string backend = Ledger::backend_of(global.ledger_dsn);
  if (print) {
    // No connection: the SQL every migration of this backend runs, in order.
    for (const auto& migration : migrations(backend)) {
      std::printf(
          "-- %s%s\n%s\n", migration.name.c_str(),
          migration.requires_extension
              ? (" (applied when the " + *migration.requires_extension + " extension is installed)")
                    .c_str()
              : "",
          migration.sql.c_str());
    }
    return k_exit_ok;
  }
  auto ledger = Ledger::open(global.ledger_dsn);
  const MigrationReport report = ledger->migrate();
  const std::string where = global.ledger_dsn.empty() ? "sqlite:" + Ledger::default_sqlite_path()
                                                      : Ledger::redact_dsn(global.ledger_dsn);
  if (global.json) {
    std::printf("%s\n", json::object({{"applied", json::strings(report.applied)},
                                      {"backend", json::str(ledger->backend_name())},
                                      {"footprints", json::boolean(ledger->has_footprints())},
                                      {"ledger", json::str(where)},
                                      {"schema_version", json::integer(report.schema_version)},
                                      {"skipped", json::strings(report.skipped)}})
                            .c_str());
    return k_exit_ok;
  }
  std::printf("ledger ready: %s (%s, schema version %d%s)\n", where.c_str(),
              ledger->backend_name().c_str(), report.schema_version,
              ledger->has_footprints() ? ", with footprints" : "");
  for (const auto& name : report.skipped) {
    std::printf("not applied: %s (needs an extension that is not installed)\n", name.c_str());
  }
  return k_exit_ok;
}

}  // namespace idem::cli
