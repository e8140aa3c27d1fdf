// SPDX-License-Identifier: MIT
// gdal-idem reap [--older-than DURATION] [--dry-run] [--requeue] [--namespace N] [--all-dirs]:
// release the claims whose lease expired (killed or stalled workers) and remove the orphan
// temporary directories (IDEM's own ".idem-tmp-*" naming only, older than the lease) that killed
// workers left beside the outputs recorded in the ledger. It reads only the rows such leftovers
// can belong to (in flight, or taken over: attempt > 1), page by page through a partial index,
// so its cost follows the claims in trouble, not the size of the ledger; --all-dirs looks beside
// every recorded output. --requeue prints each released claim's work as a JSON line an
// orchestrator can resubmit.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "base/canonical_json.hpp"
#include "base/directory_handle.hpp"
#include "base/file_identity.hpp"
#include "base/paths.hpp"
#include "base/safe_delete.hpp"
#include "cli.hpp"
#include "cli_json.hpp"
#include "cli_ledger.hpp"
#include "cli_progress.hpp"
#include "cli_time.hpp"
#include "cpl_conv.h"
#include "cpl_string.h"
#include "cpl_vsi.h"
#include "store/object_store.hpp"
#include "work/output_check.hpp"
#include "work/takeover_recovery.hpp"
#include "work/temp_dir.hpp"

namespace idem::cli {

namespace {

constexpr int k_default_lease_seconds = 300;  // the driver's IDEM_STALE_SECONDS default

struct Orphan {
  std::string directory;  // where it lies
  std::string name;       // its name there
  std::string path;
  double age_seconds = 0;
};

std::string parent_of(const std::string& uri) {
  const size_t slash = uri.find_last_of('/');
  if (slash == std::string::npos) {
    return ".";
  }
  return slash == 0 ? "/" : uri.substr(0, slash);
}

// Whole seconds of a time in nanoseconds: ages are measured against std::time(), which has no
// fraction.
int64_t whole_seconds(int64_t nanoseconds) {
  return nanoseconds / 1000000000;
}

// Newest modification time of the directory `name` and of what it holds (one level down, which
// is how a temporary directory lays its files out): a live writer keeps touching its file.
// Nothing is followed: a link's own time counts, not its target's.
double newest_mtime(const DirectoryHandle& directory, const std::string& name) {
  double newest = 0;
  if (const auto look = directory.look(name)) {
    newest = static_cast<double>(whole_seconds(mtime_ns_of(*look)));
  }
  if (const std::optional<DirectoryHandle> inside = directory.child(name)) {
    for (const std::string& entry : inside->entries().value_or(std::vector<std::string>())) {
      if (const auto look = inside->look(entry)) {
        newest = std::max(newest, static_cast<double>(whole_seconds(mtime_ns_of(*look))));
      }
    }
  }
  return newest;
}

// Where a worker writing `output_uri` puts its temporary directory.
std::string temp_parent_of(const std::string& output_uri) {
  // An object output's temporary copy is local to the worker (object_store.hpp): this
  // machine's CPL_TMPDIR is searched; run reap on every worker host.
  return is_object_store_path(output_uri) ? local_temp_root() : parent_of(output_uri);
}

// The directories reap looks in, each opened once by its handle (a link another user made on
// the way is not followed: that directory is left out, and said so).
std::map<std::string, DirectoryHandle> open_directories(const std::set<std::string>& paths) {
  std::map<std::string, DirectoryHandle> opened;
  for (const std::string& path : paths) {
    try {
      if (std::optional<DirectoryHandle> handle = DirectoryHandle::open(path)) {
        opened.emplace(path, std::move(*handle));
      }
    } catch (const UnsafePath& unsafe) {
      std::fprintf(stderr, "gdal-idem reap: %s not searched: %s\n", path.c_str(), unsafe.what());
    }
  }
  return opened;
}

// Orphans: IDEM's own temporary directories (real directories, not links), owned by the user
// running reap, whose token no live claim holds, which no living writer has locked (a plain
// /vsiidem/ writer holds no claim), untouched for `min_age`.
std::vector<Orphan> find_orphans(const std::map<std::string, DirectoryHandle>& directories,
                                 const std::set<std::string>& live_tokens, double min_age,
                                 double now_local) {
  std::vector<Orphan> orphans;
  const std::string prefix = k_temp_prefix;
  const uid_t self = ::geteuid();
  for (const auto& [directory, handle] : directories) {
    for (const std::string& name : handle.entries().value_or(std::vector<std::string>())) {
      if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size()) {
        continue;
      }
      if (live_tokens.count(token_of_temp_dir(name)) != 0) {
        continue;  // a live claim's own temporary directory
      }
      // Only a real directory, and this user's own: a link named like one of IDEM's is not
      // IDEM's, and neither is another user's directory in a shared CPL_TMPDIR (invariant I1).
      const std::optional<struct stat> look = handle.look(name);
      if (!look || !S_ISDIR(look->st_mode) || look->st_uid != self ||
          temp_dir_is_locked(handle, name)) {
        continue;
      }
      const double age = now_local - newest_mtime(handle, name);
      if (age >= min_age) {
        orphans.push_back(Orphan{directory, name, handle.name_path(name), age});
      }
    }
  }
  return orphans;
}

std::string requeue_line(const LedgerRow& row) {
  const auto parsed = JsonValue::parse(row.work_json);
  return json::object({
      {"layer", row.layer ? json::str(*row.layer) : json::null()},
      {"namespace", json::str(row.namespace_name)},
      {"output_uri", json::str(row.output_uri)},
      {"tile", row.tile ? json::object({{"x", json::integer(row.tile->x)},
                                        {"y", json::integer(row.tile->y)},
                                        {"z", json::integer(row.tile->z)}})
                        : json::null()},
      {"work", parsed ? row.work_json : json::str(row.work_json)},
      {"work_key", json::str(row.work_key)},
  });
}

// What the ledger's rows say, page by page: the expired, unreleased claims past
// `min_claim_expiry` (to release), the tokens of live claims (whose temporary directories stay)
// and the directories where temporary directories may lie.
struct ClaimScan {
  std::vector<LedgerRow> candidates;
  std::set<std::string> live_tokens;
  std::set<std::string> directories;
  std::map<std::string, std::string> outputs;  // claim token -> output, of the rows in flight
};

ClaimScan scan_claims(Ledger& ledger, Ledger::RowFilter filter, double min_claim_expiry) {
  ClaimScan scan;
  for (;;) {
    std::vector<LedgerRow> page = ledger.rows(filter);
    if (page.empty()) {
      break;
    }
    filter.after_work_key = page.back().work_key;
    for (LedgerRow& row : page) {
      scan.directories.insert(temp_parent_of(row.output_uri));
      if (row.state != RowState::k_in_flight) {
        continue;
      }
      scan.outputs[row.claim_token] = row.output_uri;
      const bool expired = row.lease_left_seconds && *row.lease_left_seconds <= 0;
      if (!expired) {
        scan.live_tokens.insert(row.claim_token);
      } else if (!row.released_at && -*row.lease_left_seconds >= min_claim_expiry) {
        scan.candidates.push_back(std::move(row));
      }
    }
    if (static_cast<int64_t>(page.size()) < *filter.limit) {
      break;
    }
  }
  return scan;
}

// An orphan temporary directory goes. A killed worker's beside a local output may hold the
// files its publish replaced (killed between publishing and its completion): those a completion
// recorded are put back first, so the completed output is whole again (invariant I3).
DeleteOutcome remove_orphan(Ledger& ledger, const ClaimScan& scan, const DirectoryHandle& directory,
                            const Orphan& orphan) {
  const auto output = scan.outputs.find(token_of_temp_dir(orphan.name));
  if (output == scan.outputs.end() || is_object_store_path(output->second) ||
      parent_of(output->second) != orphan.directory) {
    return delete_own_directory_at(directory, orphan.name, ::geteuid());
  }
  return remove_abandoned_temp_dir(directory, orphan.name,
                                   recorded_local_files(ledger, output->second, true));
}

// The claims `filter` selects; with a namespace, the live tokens are still those of the whole
// ledger: a temporary directory beside this namespace's outputs may be a live claim's of another
// namespace (docs/cli.md, reap).
ClaimScan scan_claims_and_live_tokens(Ledger& ledger, const Ledger::RowFilter& filter,
                                      double min_claim_expiry) {
  ClaimScan scan = scan_claims(ledger, filter, min_claim_expiry);
  if (filter.namespace_name) {
    Ledger::RowFilter every_namespace = filter;
    every_namespace.namespace_name.reset();
    every_namespace.in_flight_or_retried = true;
    every_namespace.after_work_key.reset();
    scan.live_tokens = scan_claims(ledger, every_namespace, min_claim_expiry).live_tokens;
  }
  return scan;
}

}  // namespace

int run_reap(const Args& args, const GlobalOptions& global) {
  constexpr const char* k_synopsis =
      "usage: gdal-idem reap [--older-than DURATION] [--dry-run] [--requeue] [--namespace N] "
      "[--all-dirs]";
  std::optional<std::chrono::seconds> older_than;
  bool dry_run = false;
  bool requeue = false;
  bool all_dirs = false;
  std::optional<std::string> namespace_name;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--older-than" && i + 1 < args.size()) {
      older_than = parse_duration(args[++i], "--older-than");
    } else if (args[i] == "--dry-run" || args[i] == "-n") {
      dry_run = true;
    } else if (args[i] == "--requeue") {
      requeue = true;
    } else if (args[i] == "--all-dirs") {
      all_dirs = true;
    } else if (args[i] == "--namespace" && i + 1 < args.size()) {
      namespace_name = label_argument("--namespace", args[++i]);
    } else {
      throw UsageError{"unknown argument '" + args[i] + "'; " + k_synopsis};
    }
  }
  double lease_seconds = k_default_lease_seconds;
  if (const char* stale = CPLGetConfigOption("IDEM_STALE_SECONDS", nullptr)) {
    lease_seconds = std::max(1.0, std::atof(stale));
  }
  const double min_claim_expiry = older_than ? double(older_than->count()) : 0.0;
  const double min_temp_age = older_than ? double(older_than->count()) : lease_seconds;

  auto ledger = open_ledger(global);
  Progress progress(!global.quiet);
  Ledger::RowFilter filter;
  filter.namespace_name = namespace_name;
  // A killed worker's temporary directory lies beside a row that is still in flight or that a
  // later claim took over; the completed rows of first attempts need not be read.
  filter.in_flight_or_retried = !all_dirs;
  filter.limit = ledger_page_rows();
  const double now = ledger->now();

  const ClaimScan scan = scan_claims_and_live_tokens(*ledger, filter, min_claim_expiry);
  const std::vector<LedgerRow>& candidates = scan.candidates;
  const std::set<std::string>& live_tokens = scan.live_tokens;
  const std::set<std::string>& directories = scan.directories;
  std::vector<LedgerRow> released;
  for (size_t i = 0; i < candidates.size(); ++i) {
    // Fenced on the token we saw: a claim taken over meanwhile is left alone.
    if (dry_run || ledger->release(candidates[i].work_key, candidates[i].claim_token)) {
      released.push_back(candidates[i]);
    }
    progress.update(0.5 * double(i + 1) / double(candidates.size()));
  }
  progress.update(0.5);
  const std::map<std::string, DirectoryHandle> handles = open_directories(directories);
  const std::vector<Orphan> orphans =
      find_orphans(handles, live_tokens, min_temp_age, static_cast<double>(std::time(nullptr)));
  std::vector<std::string> removed_failed;
  for (size_t i = 0; i < orphans.size(); ++i) {
    const DeleteOutcome outcome =
        dry_run ? DeleteOutcome::k_deleted
                : remove_orphan(*ledger, scan, handles.at(orphans[i].directory), orphans[i]);
    if (outcome != DeleteOutcome::k_deleted && outcome != DeleteOutcome::k_absent) {
      removed_failed.push_back(orphans[i].path);
    }
    progress.update(0.5 + 0.5 * double(i + 1) / double(orphans.size()));
  }
  progress.finish();

  FILE* human = requeue ? stderr : stdout;
  if (requeue) {
    for (const LedgerRow& row : released) {
      std::printf("%s\n", requeue_line(row).c_str());
    }
  }
  if (global.json && !requeue) {
    std::vector<std::string> claims;
    for (const LedgerRow& row : released) {
      auto members = row_json_members(row);
      members["lease_expires_at"] = json::time(row.lease_expires_at);
      claims.push_back(json::object(members));
    }
    std::vector<std::string> temps;
    for (const Orphan& orphan : orphans) {
      bool failed = false;
      for (const auto& path : removed_failed) {
        failed = failed || path == orphan.path;
      }
      temps.push_back(json::object({{"age_seconds", json::real(orphan.age_seconds)},
                                    {"path", json::str(orphan.path)},
                                    {"removed", json::boolean(!dry_run && !failed)}}));
    }
    std::printf("%s\n", json::object({{"dry_run", json::boolean(dry_run)},
                                      {"orphans", json::array(temps)},
                                      {"released", json::array(claims)}})
                            .c_str());
  } else {
    const char* verb = dry_run ? "would release" : "released";
    for (const LedgerRow& row : released) {
      std::fprintf(
          human, "%s %s (%s pid %lld, claimed %s, lease expired %s ago) -> %s\n", verb,
          row.work_key.substr(0, 12).c_str(), row.worker_host.c_str(),
          static_cast<long long>(row.worker_pid), format_time(row.claimed_at.value_or(0)).c_str(),
          format_age(now - row.lease_expires_at.value_or(now)).c_str(), row.output_uri.c_str());
    }
    for (const Orphan& orphan : orphans) {
      std::fprintf(human, "%s orphan %s (untouched for %s)\n", dry_run ? "would remove" : "removed",
                   orphan.path.c_str(), format_age(orphan.age_seconds).c_str());
    }
    for (const auto& path : removed_failed) {
      std::fprintf(stderr, "gdal-idem reap: could not remove %s\n", path.c_str());
    }
    std::fprintf(human, "%s %zu stale claim(s), %s %zu orphan temporary director%s\n",
                 dry_run ? "would release" : "released", released.size(),
                 dry_run ? "would remove" : "removed", orphans.size(),
                 orphans.size() == 1 ? "y" : "ies");
  }
  return released.empty() && orphans.empty() ? k_exit_ok : k_exit_problems;
}

}  // namespace idem::cli
