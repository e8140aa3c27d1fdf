// gdal-idem init: create or migrate the ledger schema (safe to run again).
#include <cstdio>

#include "cli.hpp"
#include "ledger/ledger.hpp"

namespace idem::cli {

int run_init(const Args& args, const GlobalOptions& global) {
  for (const auto& arg : args) {
    throw UsageError{"unknown argument '" + arg + "'; usage: gdal-idem init"};
  }
  // Opening applies every pending migration.
  auto ledger = Ledger::open(global.ledger_dsn);
  const std::string where =
      global.ledger_dsn.empty() ? "sqlite:" + Ledger::default_sqlite_path()
                                : Ledger::redact_dsn(global.ledger_dsn);
  if (global.json) {
    std::printf("{\"backend\":%s,\"ledger\":%s,\"status\":\"ready\"}\n",
                json_quote(ledger->backend_name()).c_str(), json_quote(where).c_str());
  } else {
    std::printf("ledger ready: %s (%s)\n", where.c_str(), ledger->backend_name().c_str());
  }
  return k_exit_ok;
}

}  // namespace idem::cli
