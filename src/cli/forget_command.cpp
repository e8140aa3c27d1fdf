// SPDX-License-Identifier: MIT
// gdal-idem forget KEY | --output URI | --namespace N [--layer L] [--delete-output]: delete
// ledger rows first, then (with --delete-output) their outputs and sidecars; never the reverse,
// so a crash in between leaves an output the ledger no longer vouches for, never a row that
// vouches for a missing output.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>

#include "base/safe_delete.hpp"
#include "cli.hpp"
#include "cli_json.hpp"
#include "cli_ledger.hpp"
#include "cli_progress.hpp"
#include "cpl_error.h"
#include "cpl_string.h"
#include "cpl_vsi.h"
#include "store/object_store.hpp"
#include "work/output_check.hpp"

namespace idem::cli {

namespace {

// What removing a forgotten output did: the files deleted, and why anything was kept. `problem`
// is set when a recorded file could not be deleted (it changed, or could not be looked at) or a
// run that wrote the output meanwhile was withdrawn: the command then found a problem (exit 1);
// an output already gone, or still recorded by another row, is not one.
struct Removal {
  std::string output;
  std::vector<std::string> deleted;
  std::string kept_because;
  bool problem = false;
};

// Removes the files the completion `row` recorded (its sidecars, then the primary), each only
// while it is still the file recorded (invariant I1: never what the dataset now at the path
// lists, which for a VRT is its sources and for a tile may be a neighbour's file).
void remove_recorded_output(const LedgerRow& row, Removal& removal) {
  if (!row.fingerprint) {
    removal.kept_because = "no completion recorded its files";
    return;
  }
  const OutputFingerprint& recorded = *row.fingerprint;
  std::vector<std::string> changed;
  const auto remove_local = [&](const KnownFile& file) {
    switch (delete_known_file(file)) {
      case DeleteOutcome::k_deleted:
        removal.deleted.push_back(file.path);
        break;
      case DeleteOutcome::k_absent:
        break;
      case DeleteOutcome::k_not_ours:
        changed.push_back(file.path + " is not the file recorded");
        break;
      case DeleteOutcome::k_failed:
        changed.push_back(file.path + ": " + std::strerror(errno));
        break;
    }
  };
  const auto remove_object = [&](const std::string& path, const OutputFingerprint& expected) {
    std::string why;
    switch (delete_recorded_object(path, expected, {}, false, &why)) {
      case DeleteOutcome::k_deleted:
        removal.deleted.push_back(path);
        break;
      case DeleteOutcome::k_absent:
        break;
      case DeleteOutcome::k_failed:
        changed.push_back(path + " was not deleted: " + why);
        break;
      case DeleteOutcome::k_not_ours:
        changed.push_back(path + " is not the object recorded");
        break;
    }
  };
  const bool object = is_object_store_path(row.output_uri);
  const std::optional<std::vector<RecordedMember>> members = recorded_members(recorded);
  if (!members) {
    changed.push_back("its sidecars were not recorded (completed by an older release)");
  }
  for (const RecordedMember& member : members.value_or(std::vector<RecordedMember>())) {
    if (member.tree) {
      changed.push_back("a directory dataset is kept");
    } else if (object && member.etag) {
      OutputFingerprint expected;
      expected.size = member.size;
      expected.etag = member.etag;
      remove_object(member.path, expected);
    } else if (!object && member.mtime_ns) {
      remove_local(
          KnownFile{member.path, member.size, member.mtime_ns, std::nullopt, std::nullopt});
    }
  }
  if (object) {
    remove_object(row.output_uri, recorded);
  } else {
    remove_local(
        KnownFile{row.output_uri, recorded.size,
                  recorded.mtime_ns != 0 ? std::optional<int64_t>(recorded.mtime_ns) : std::nullopt,
                  std::nullopt, std::nullopt});
  }
  if (!changed.empty()) {
    removal.problem = true;
    removal.kept_because = CPLString(changed.front());
    for (size_t i = 1; i < changed.size(); ++i) {
      removal.kept_because += "; " + changed[i];
    }
  } else if (removal.deleted.empty()) {
    removal.kept_because = "not found";
  }
}

// After `output`'s files were deleted: a run of work on that output may have claimed it, and
// even uploaded the same bytes (the same ETag, which a conditional delete cannot tell from the
// forgotten object's) and completed, between the look before the delete and the delete itself.
// No row may vouch for what was deleted: the completions recorded meanwhile are withdrawn (the
// next run redoes the work) and the claims in flight released (fenced on their tokens: their
// completion is then refused and they take back what they published). Said in `removal`.
void withdraw_runs_of_meanwhile(Ledger& ledger, const std::string& output, Removal& removal) {
  Ledger::RowFilter on_output;
  on_output.output_uri = output;
  std::vector<std::string> withdrawn;
  for (const LedgerRow& row : ledger.rows(on_output)) {
    const bool done = row.state == RowState::k_completed
                          ? ledger.invalidate(row.work_key, row.claim_token)
                          : row.state == RowState::k_in_flight && !row.released_at &&
                                ledger.release(row.work_key, row.claim_token);
    if (done) {
      withdrawn.push_back(row.work_key.substr(0, 12));
    }
  }
  if (!withdrawn.empty()) {
    removal.problem = true;
    removal.kept_because = "a run of key " + withdrawn.front() +
                           (withdrawn.size() > 1 ? " (and others)" : "") +
                           " wrote this output while it was deleted: its claim or completion was "
                           "withdrawn, so the next run redoes it";
  }
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
      filter.namespace_name = label_argument("--namespace", args[++i]);
    } else if (args[i] == "--layer" && i + 1 < args.size()) {
      filter.layer = label_argument("--layer", args[++i]);
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

  std::vector<Removal> removals;
  if (delete_output) {
    // One removal an output: the newest completion forgotten names the files there now.
    std::map<std::string, const LedgerRow*> outputs;
    for (const LedgerRow& row : forgotten) {
      const LedgerRow*& newest = outputs[row.output_uri];
      if (newest == nullptr ||
          (row.fingerprint && (!newest->fingerprint ||
                               row.completed_at.value_or(0) > newest->completed_at.value_or(0)))) {
        newest = &row;
      }
    }
    size_t done = 0;
    for (const auto& [output, row] : outputs) {
      Removal removal{output, {}, {}};
      Ledger::RowFilter still;
      still.output_uri = output;
      still.limit = 1;
      const std::vector<LedgerRow> others = ledger->rows(still);
      if (!others.empty()) {
        removal.kept_because = "still recorded by key " + others.front().work_key.substr(0, 12);
      } else {
        remove_recorded_output(*row, removal);
        if (!removal.deleted.empty()) {
          withdraw_runs_of_meanwhile(*ledger, output, removal);
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
  const bool problem = std::any_of(removals.begin(), removals.end(),
                                   [](const Removal& removal) { return removal.problem; });
  return forgotten.empty() || problem ? k_exit_problems : k_exit_ok;
}

}  // namespace idem::cli
