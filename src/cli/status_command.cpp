// SPDX-License-Identifier: MIT
// gdal-idem status [--namespace N] [--layer L]: counts of completed, in-flight, stale, released
// and superseded rows, the oldest in-flight claim and the completions of the last hour. Exits 1
// only while a stale claim is left (released ones need nothing).
#include <cstdio>

#include "cli.hpp"
#include "cli_json.hpp"
#include "cli_ledger.hpp"
#include "cli_time.hpp"

namespace idem::cli {

int run_status(const Args& args, const GlobalOptions& global) {
  Ledger::RowFilter filter;
  constexpr const char* k_synopsis = "usage: gdal-idem status [--namespace N] [--layer L]";
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--namespace" && i + 1 < args.size()) {
      filter.namespace_name = label_argument("--namespace", args[++i]);
    } else if (args[i] == "--layer" && i + 1 < args.size()) {
      filter.layer = label_argument("--layer", args[++i]);
    } else {
      throw UsageError{"unknown argument '" + args[i] + "'; " + k_synopsis};
    }
  }
  auto ledger = open_ledger_read_only(global);
  const LedgerCounts counts = ledger->counts(filter);
  const double now = ledger->now();
  const double oldest_claimed_at = counts.oldest_in_flight_claimed_at.value_or(now);
  const bool has_oldest = counts.oldest_in_flight_claimed_at.has_value();
  if (global.json) {
    std::printf(
        "%s\n",
        json::object(
            {
                {"backend", json::str(ledger->backend_name())},
                {"completed", json::integer(counts.completed)},
                {"completed_last_hour", json::integer(counts.completed_last_hour)},
                {"in_flight", json::integer(counts.in_flight)},
                {"layer", filter.layer ? json::str(*filter.layer) : json::null()},
                {"ledger", json::str(ledger_label(global))},
                {"namespace",
                 filter.namespace_name ? json::str(*filter.namespace_name) : json::null()},
                {"oldest_in_flight_age_seconds",
                 has_oldest ? json::real(now - oldest_claimed_at) : json::null()},
                {"oldest_in_flight_claimed_at", json::time(counts.oldest_in_flight_claimed_at)},
                {"released", json::integer(counts.released)},
                {"stale", json::integer(counts.stale)},
                {"superseded", json::integer(counts.superseded)},
            })
            .c_str());
  } else {
    std::printf("ledger:     %s (%s)\n", ledger_label(global).c_str(),
                ledger->backend_name().c_str());
    if (filter.namespace_name || filter.layer) {
      std::printf("scope:      namespace %s, layer %s\n",
                  filter.namespace_name ? filter.namespace_name->c_str() : "(all)",
                  filter.layer ? filter.layer->c_str() : "(all)");
    }
    std::printf("completed:  %lld\n", static_cast<long long>(counts.completed));
    std::printf("in flight:  %lld\n", static_cast<long long>(counts.in_flight));
    std::printf("stale:      %lld%s\n", static_cast<long long>(counts.stale),
                counts.stale > 0 ? " (lease expired; `gdal-idem reap` releases them)" : "");
    std::printf("released:   %lld%s\n", static_cast<long long>(counts.released),
                counts.released > 0 ? " (given up; the next run claims them)" : "");
    std::printf("superseded: %lld\n", static_cast<long long>(counts.superseded));
    if (counts.oldest_in_flight_claimed_at) {
      std::printf("oldest in-flight claim: %s (%s ago)\n",
                  format_time(*counts.oldest_in_flight_claimed_at).c_str(),
                  format_age(now - oldest_claimed_at).c_str());
    } else {
      std::printf("oldest in-flight claim: none\n");
    }
    std::printf("completed in the last hour: %lld\n",
                static_cast<long long>(counts.completed_last_hour));
  }
  return counts.stale > 0 ? k_exit_problems : k_exit_ok;
}

}  // namespace idem::cli
