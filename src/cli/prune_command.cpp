// SPDX-License-Identifier: MIT
// gdal-idem prune --keep-latest | --older-than DURATION [--drop-history DURATION]
// [--namespace N] [--force]: retention. Moves completed rows into history (superseded ones with
// --keep-latest; those completed before the horizon with --older-than) and deletes history rows
// completed before --drop-history. Never during a run: it refuses while live claims of the same
// namespace are in flight, unless --force.
#include <cstdio>

#include "cli.hpp"
#include "cli_json.hpp"
#include "cli_ledger.hpp"
#include "cli_time.hpp"

namespace idem::cli {

int run_prune(const Args& args, const GlobalOptions& global) {
  constexpr const char* k_synopsis =
      "usage: gdal-idem prune --keep-latest | --older-than DURATION [--drop-history DURATION] "
      "[--namespace N] [--force]";
  ArchiveRequest request;
  bool keep_latest = false;
  bool force = false;
  std::optional<std::chrono::seconds> drop_history;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--keep-latest") {
      keep_latest = true;
    } else if (args[i] == "--older-than" && i + 1 < args.size()) {
      request.older_than = parse_duration(args[++i], "--older-than");
    } else if (args[i] == "--drop-history" && i + 1 < args.size()) {
      drop_history = parse_duration(args[++i], "--drop-history");
    } else if (args[i] == "--namespace" && i + 1 < args.size()) {
      request.namespace_name = label_argument("--namespace", args[++i]);
    } else if (args[i] == "--force") {
      force = true;
    } else {
      throw UsageError{"unknown argument '" + args[i] + "'; " + k_synopsis};
    }
  }
  if (!keep_latest && !request.older_than && !drop_history) {
    throw UsageError{std::string("say what to prune; ") + k_synopsis};
  }
  request.superseded_only = keep_latest && !request.older_than;
  auto ledger = open_ledger(global);
  Ledger::RowFilter scope;
  scope.namespace_name = request.namespace_name;
  const LedgerCounts counts = ledger->counts(scope);
  // Dropping history never touches live work; only archiving is refused during a run.
  const bool archives = keep_latest || request.older_than.has_value();
  if (archives && counts.in_flight > 0 && !force) {
    const std::string message =
        std::to_string(counts.in_flight) + " claim(s) " +
        (request.namespace_name ? "of namespace " + *request.namespace_name + " " : "") +
        "are in flight; prune refuses to run during a run (archived work reads as absent and "
        "would be redone). Wait, or use --force";
    if (global.json) {
      std::printf("%s\n", json::object({{"archived", json::integer(0)},
                                        {"history_dropped", json::integer(0)},
                                        {"in_flight", json::integer(counts.in_flight)},
                                        {"refused", json::boolean(true)}})
                              .c_str());
    }
    std::fprintf(stderr, "gdal-idem prune: %s\n", message.c_str());
    return k_exit_problems;
  }
  int64_t archived = 0;
  if (keep_latest || request.older_than) {
    archived = ledger->archive(request);
    if (keep_latest && request.older_than) {
      // Both: superseded rows of any age, and anything older than the horizon.
      ArchiveRequest superseded = request;
      superseded.older_than.reset();
      superseded.superseded_only = true;
      archived += ledger->archive(superseded);
    }
  }
  int64_t dropped = 0;
  if (drop_history) {
    dropped = ledger->drop_history(*drop_history, request.namespace_name);
  }
  if (global.json) {
    std::printf("%s\n", json::object({{"archived", json::integer(archived)},
                                      {"history_dropped", json::integer(dropped)},
                                      {"in_flight", json::integer(counts.in_flight)},
                                      {"refused", json::boolean(false)}})
                            .c_str());
  } else {
    std::printf("moved %lld completed row(s) into history", static_cast<long long>(archived));
    if (drop_history) {
      std::printf(", dropped %lld history row(s)", static_cast<long long>(dropped));
    }
    std::printf("\n");
  }
  return k_exit_ok;
}

}  // namespace idem::cli
