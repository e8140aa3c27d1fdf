// SPDX-License-Identifier: MIT
// gdal-idem load [--mode replace|append] [--namespace N] -- ogr2ogr ARGS...: an idempotent
// ogr2ogr into PostGIS (docs/loads.md). The arguments are parsed by GDAL's own ogr2ogr parser;
// the work itself is src/work/feature_load.cpp.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/error.hpp"
#include "base/paths.hpp"
#include "cli.hpp"
#include "cli_json.hpp"
#include "cli_ledger.hpp"
#include "cpl_conv.h"
#include "cpl_string.h"
#include "key/source_digest.hpp"
#include "work/feature_load.hpp"

namespace idem::cli {

namespace {

constexpr const char* k_load_usage =
    "usage: gdal-idem load [--mode replace|append] [--namespace N] [--json] -- ogr2ogr ARGS...";

std::chrono::seconds lease_from_config() {
  const char* value = CPLGetConfigOption("IDEM_STALE_SECONDS", nullptr);
  if (value == nullptr) {
    return std::chrono::seconds(300);
  }
  char* end = nullptr;
  const long seconds = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || seconds < 2) {
    throw UsageError{std::string("IDEM_STALE_SECONDS=") + value +
                     " is not a lease length: give whole seconds, at least 2"};
  }
  return std::chrono::seconds(seconds);
}

}  // namespace

int run_load(const Args& args, const GlobalOptions& global) {
  FeatureLoadRequest request;
  std::optional<std::string> namespace_name;
  bool json = global.json;
  size_t i = 0;
  for (; i < args.size() && args[i] != "--"; ++i) {
    if (args[i] == "--mode" && i + 1 < args.size()) {
      request.settings.mode = parse_load_mode(args[++i]);
    } else if (args[i] == "--namespace" && i + 1 < args.size()) {
      namespace_name = label_argument("--namespace", args[++i]);
    } else if (args[i] == "--json") {
      json = true;
    } else {
      throw UsageError{"unknown option '" + args[i] + "'; " + k_load_usage};
    }
  }
  if (i + 1 >= args.size() || basename_of(args[i + 1]) != "ogr2ogr") {
    throw UsageError{k_load_usage};
  }
  // Parsing applies the command's --config options, so IDEM_* settings are read afterwards.
  request.command =
      parse_ogr2ogr_command(Args(args.begin() + static_cast<long>(i) + 2, args.end()));
  request.settings.namespace_name =
      namespace_name.value_or(CPLGetConfigOption("IDEM_NAMESPACE", "default"));
  request.settings.digest_policy = source_digest_policy_from_config();
  request.ledger_dsn =
      global.ledger_dsn.empty() ? CPLGetConfigOption("IDEM_LEDGER", "") : global.ledger_dsn;
  request.lease = lease_from_config();
  const std::string on_busy = CPLString(CPLGetConfigOption("IDEM_ON_BUSY", "WAIT")).toupper();
  if (on_busy != "WAIT" && on_busy != "FAIL") {
    throw UsageError{"IDEM_ON_BUSY=" + on_busy + " is not valid: use WAIT (the default) or FAIL"};
  }
  request.fail_when_busy = on_busy == "FAIL";
  for (const auto& option : request.command.options) {
    if (option == "-progress") {
      request.show_progress = !global.quiet && !json;
    }
  }

  const FeatureLoadResult result = run_feature_load(request);
  const bool loaded = result.outcome == FeatureLoadOutcome::k_loaded;
  if (json) {
    std::printf("%s\n",
                json::object({{"attempt", json::integer(result.attempt)},
                              {"completed_with_swap", json::boolean(result.completed_with_swap)},
                              {"feature_count", json::integer(result.feature_count)},
                              {"key", json::str(result.work.key)},
                              {"mode", json::str(load_mode_name(result.work.mode))},
                              {"outcome", json::str(loaded ? "loaded" : "skipped")},
                              {"target", json::str(result.work.target.display)}})
                    .c_str());
  } else if (!global.quiet) {
    if (loaded) {
      std::printf("loaded %lld features into %s (%s, key %s, attempt %lld)\n",
                  static_cast<long long>(result.feature_count), result.work.target.display.c_str(),
                  load_mode_name(result.work.mode), result.work.key.substr(0, 12).c_str(),
                  static_cast<long long>(result.attempt));
    } else {
      std::printf(
          "skipped %s: %s (key %s, %lld features)\n", result.work.target.display.c_str(),
          result.waited ? "loaded by another worker while this one waited" : "already loaded",
          result.work.key.substr(0, 12).c_str(), static_cast<long long>(result.feature_count));
    }
  }
  return k_exit_ok;
}

}  // namespace idem::cli
