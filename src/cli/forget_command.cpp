// gdal-idem forget KEY | --output URI | --namespace N [--layer L] [--delete-output]: delete
// ledger rows first, then (with --delete-output) their outputs and sidecars; never the reverse,
// so a crash in between leaves an output the ledger no longer vouches for, never a row that
// vouches for a missing output.
#include <cstdio>
#include <set>

#include "base/held_messages.hpp"
#include "cli.hpp"
#include "cli_util.hpp"
#include "cpl_error.h"
#include "cpl_string.h"
#include "cpl_vsi.h"
#include "gdal_priv.h"

namespace idem::cli {

namespace {

// Every file of the output's dataset (sidecars included), primary last.
std::vector<std::string> dataset_files(const std::string& uri) {
  std::vector<std::string> files;
  const GDALDatasetUniquePtr dataset =
      open_quietly(uri, GDAL_OF_RASTER | GDAL_OF_VECTOR | GDAL_OF_READONLY);
  if (dataset) {
    const CPLStringList list(dataset->GetFileList());
    for (int i = 0; i < list.size(); ++i) {
      if (uri != list[i]) {
        files.emplace_back(list[i]);
      }
    }
  } else {
    for (const char* suffix : {".aux.xml", ".ovr", ".msk"}) {
      VSIStatBufL info;
      if (VSIStatL((uri + suffix).c_str(), &info) == 0) {
        files.push_back(uri + suffix);
      }
    }
  }
  files.push_back(uri);
  return files;
}

constexpr const char* k_forget_synopsis =
    "usage: gdal-idem forget KEY | --output URI | --namespace N [--layer L] [--delete-output]";

// What `forget` was asked: the rows (by key prefix, output or namespace) and whether their
// outputs go too.
struct ForgetRequest {
  Ledger::RowFilter filter;
  std::optional<std::string> key;
  bool delete_output = false;
};

ForgetRequest parse_forget(const Args& args) {
  ForgetRequest request;
  Ledger::RowFilter& filter = request.filter;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--output" && i + 1 < args.size()) {
      filter.output_uri = output_uri_argument(args[++i]);
    } else if (args[i] == "--namespace" && i + 1 < args.size()) {
      filter.namespace_name = args[++i];
    } else if (args[i] == "--layer" && i + 1 < args.size()) {
      filter.layer = args[++i];
    } else if (args[i] == "--delete-output") {
      request.delete_output = true;
    } else if (!args[i].empty() && args[i][0] != '-' && !request.key) {
      request.key = args[i];
    } else {
      throw UsageError{"unknown argument '" + args[i] + "'; " + k_forget_synopsis};
    }
  }
  const int selectors =
      (request.key ? 1 : 0) + (filter.output_uri ? 1 : 0) + (filter.namespace_name ? 1 : 0);
  if (selectors != 1 || (filter.layer && !filter.namespace_name)) {
    throw UsageError{std::string("give exactly one of KEY, --output, --namespace (--layer goes "
                                 "with --namespace); ") +
                     k_forget_synopsis};
  }
  return request;
}

// The one key the ledger holds that starts with `prefix`.
std::string whole_key(Ledger& ledger, const std::string& prefix) {
  if (!is_hex_key_prefix(prefix)) {
    throw UsageError{"'" + prefix + "' is not a key (lowercase hex digits, or a prefix of them)"};
  }
  Ledger::RowFilter by_prefix;
  by_prefix.work_key_prefix = prefix;
  by_prefix.limit = 2;
  const std::vector<LedgerRow> matches = ledger.rows(by_prefix);
  if (matches.empty()) {
    throw UsageError{"unknown key '" + prefix + "'"};
  }
  if (matches.size() > 1) {
    throw UsageError{"key prefix '" + prefix + "' is ambiguous; give more digits"};
  }
  return matches.front().work_key;
}

}  // namespace

int run_forget(const Args& args, const GlobalOptions& global) {
  ForgetRequest request = parse_forget(args);
  Ledger::RowFilter& filter = request.filter;
  const bool delete_output = request.delete_output;
  auto ledger = open_ledger(global);
  if (request.key) {
    filter.work_key = whole_key(*ledger, *request.key);
  }
  // The rows first, in one statement.
  const std::vector<LedgerRow> forgotten = ledger->forget_rows(filter);
  Progress progress(!global.quiet && delete_output && !forgotten.empty());

  struct Removal {
    std::string output;
    std::vector<std::string> deleted;
    std::string kept_because;
  };
  std::vector<Removal> removals;
  if (delete_output) {
    std::set<std::string> outputs;
    for (const LedgerRow& row : forgotten) {
      outputs.insert(row.output_uri);
    }
    size_t done = 0;
    for (const std::string& output : outputs) {
      Removal removal{output, {}, {}};
      Ledger::RowFilter still;
      still.output_uri = output;
      still.limit = 1;
      const std::vector<LedgerRow> others = ledger->rows(still);
      if (!others.empty()) {
        removal.kept_because = "still recorded by key " + others.front().work_key.substr(0, 12);
      } else {
        for (const std::string& file : dataset_files(output)) {
          try {
            refuse_ledger_as_output(file, global);
          } catch (const UsageError&) {
            removal.kept_because = "it is the ledger database";
            continue;
          }
          if (VSIUnlink(file.c_str()) == 0) {
            removal.deleted.push_back(file);
          }
        }
        if (removal.deleted.empty()) {
          removal.kept_because = "not found";
        }
      }
      removals.push_back(std::move(removal));
      progress.update(++done, outputs.size());
    }
    progress.finish();
  }

  if (global.json) {
    std::vector<std::string> rows;
    rows.reserve(forgotten.size());
    for (const LedgerRow& row : forgotten) {
      rows.push_back(json::object(row_json_members(row)));
    }
    std::vector<std::string> outputs;
    for (const Removal& removal : removals) {
      std::vector<std::string> deleted;
      for (const auto& file : removal.deleted) {
        deleted.push_back(json::str(file));
      }
      outputs.push_back(json::object(
          {{"deleted", json::array(deleted)},
           {"kept_because",
            removal.kept_because.empty() ? json::null() : json::str(removal.kept_because)},
           {"output", json::str(removal.output)}}));
    }
    std::printf("%s\n",
                json::object({{"forgotten", json::array(rows)}, {"outputs", json::array(outputs)}})
                    .c_str());
  } else {
    for (const LedgerRow& row : forgotten) {
      std::printf("forgot %s (%s) %s\n", row.work_key.substr(0, 12).c_str(),
                  row_state_name(row).c_str(), row.output_uri.c_str());
    }
    for (const Removal& removal : removals) {
      for (const auto& file : removal.deleted) {
        std::printf("deleted %s\n", file.c_str());
      }
      if (!removal.kept_because.empty()) {
        std::printf("kept %s (%s)\n", removal.output.c_str(), removal.kept_because.c_str());
      }
    }
    std::printf("forgot %zu row(s)\n", forgotten.size());
  }
  return forgotten.empty() ? k_exit_problems : k_exit_ok;
}

}  // namespace idem::cli
