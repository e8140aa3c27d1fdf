// SPDX-License-Identifier: MIT
// gdal-idem inflight [--all] [--namespace N] [--layer L]: the claims whose lease expired (a
// killed or stalled worker's): who held them, since when, and their output. --all lists the
// live claims too, and the released ones (given up by a failure or `gdal-idem reap`; the next
// claim takes them), which need nothing. Exits 1 only while a stale claim is left.
#include <algorithm>
#include <cstdio>

#include "cli.hpp"
#include "cli_json.hpp"
#include "cli_ledger.hpp"
#include "cli_time.hpp"

namespace idem::cli {

int run_inflight(const Args& args, const GlobalOptions& global) {
  constexpr const char* k_synopsis =
      "usage: gdal-idem inflight [--all] [--namespace N] [--layer L]";
  Ledger::RowFilter filter;
  filter.state = RowState::k_in_flight;
  bool all = false;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--namespace" && i + 1 < args.size()) {
      filter.namespace_name = label_argument("--namespace", args[++i]);
    } else if (args[i] == "--layer" && i + 1 < args.size()) {
      filter.layer = label_argument("--layer", args[++i]);
    } else if (args[i] == "--all") {
      all = true;
    } else {
      throw UsageError{"unknown argument '" + args[i] + "'; " + k_synopsis};
    }
  }
  filter.expired_only = !all;
  auto ledger = open_ledger_read_only(global);
  std::vector<LedgerRow> rows = ledger->rows(filter);
  if (!all) {
    rows.erase(std::remove_if(rows.begin(), rows.end(),
                              [](const LedgerRow& row) { return row.released_at.has_value(); }),
               rows.end());
  }
  const double now = ledger->now();
  int64_t stale = 0;
  std::vector<std::string> items;
  for (const LedgerRow& row : rows) {
    const bool is_stale = row_state_name(row) == "stale";
    stale += is_stale ? 1 : 0;
    if (global.json) {
      auto members = row_json_members(row);
      members["lease_expires_at"] = json::time(row.lease_expires_at);
      members["lease_left_seconds"] =
          row.lease_left_seconds ? json::real(*row.lease_left_seconds) : json::null();
      members["released_at"] = json::time(row.released_at);
      items.push_back(json::object(members));
      continue;
    }
    std::string lease;
    if (row.released_at) {
      lease = "released " + format_age(now - *row.released_at) + " ago";
    } else if (row.lease_left_seconds && *row.lease_left_seconds <= 0) {
      lease = "lease expired " + format_age(-*row.lease_left_seconds) + " ago";
    } else {
      lease = "lease left " + format_age(row.lease_left_seconds.value_or(0));
    }
    std::printf("%s  %-9s  %s pid %lld  claimed %s (%s ago, attempt %lld)  %s\n    -> %s\n",
                row.work_key.substr(0, 12).c_str(), row_state_name(row).c_str(),
                row.worker_host.c_str(), static_cast<long long>(row.worker_pid),
                format_time(row.claimed_at.value_or(0)).c_str(),
                format_age(now - row.claimed_at.value_or(now)).c_str(),
                static_cast<long long>(row.attempt), lease.c_str(), row.output_uri.c_str());
  }
  if (global.json) {
    std::printf("%s\n", json::object({{"claims", json::array(items)},
                                      {"count", json::integer(static_cast<int64_t>(rows.size()))},
                                      {"stale", json::integer(stale)}})
                            .c_str());
  } else if (rows.empty()) {
    std::printf(all ? "no claims in flight\n" : "no stale claims\n");
  } else {
    std::printf("%lld claim(s), %lld stale%s\n", static_cast<long long>(rows.size()),
                static_cast<long long>(stale),
                stale > 0 ? " (`gdal-idem reap` releases them)" : "");
  }
  return stale > 0 ? k_exit_problems : k_exit_ok;
}

}  // namespace idem::cli
