// SPDX-License-Identifier: MIT
// gdal-idem verify [--namespace N] [--checksum]: every completed (not superseded) row's output
// exists, matches its recorded fingerprint (size and mtime_ns locally; size and ETag on object
// stores; the SHA-256 with --checksum), opens in GDAL with the recorded size and band count, and
// consists of the files recorded at completion (its sidecars, unchanged, none added).
// A failing row is removed (the row only, fenced on the completion that was checked) so the next
// run redoes the work. Rows are read page by page (keyset paging on work_key) and failures are
// spooled to a temporary file, so memory stays bounded on a ledger of millions of rows.
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>

#include "base/file_identity.hpp"
#include "base/held_messages.hpp"
#include "base/paths.hpp"
#include "base/sha256.hpp"
#include "cli.hpp"
#include "cli_json.hpp"
#include "cli_ledger.hpp"
#include "cli_progress.hpp"
#include "cpl_error.h"
#include "cpl_string.h"
#include "cpl_vsi.h"
#include "gdal_priv.h"
#include "key/work_grid.hpp"
#include "store/object_store.hpp"
#include "work/output_check.hpp"

namespace idem::cli {

namespace {

// The failure reports, held in a temporary file until the summary is known: memory stays
// bounded however many outputs fail, and stdout still comes out whole after the progress bar.
// Falls back to memory when no temporary file can be made.
class Spool {
 public:
  Spool() : m_file(std::tmpfile()) {}
  ~Spool() {
    if (m_file != nullptr) {
      std::fclose(m_file);
    }
  }
  Spool(const Spool&) = delete;
  Spool& operator=(const Spool&) = delete;

  void write(const std::string& text) {
    if (m_file == nullptr || std::fwrite(text.data(), 1, text.size(), m_file) != text.size()) {
      m_memory += text;  // (a partial write then repeats in memory: never lost)
    }
  }
  void copy_to(FILE* out) {
    if (m_file != nullptr) {
      std::rewind(m_file);
      char buffer[65536];
      size_t got = 0;
      while ((got = std::fread(buffer, 1, sizeof buffer, m_file)) > 0) {
        std::fwrite(buffer, 1, got, out);
      }
    }
    std::fputs(m_memory.c_str(), out);
  }

 private:
  FILE* m_file;
  std::string m_memory;
};

std::optional<std::string> file_sha256(const std::string& uri) {
  VSILFILE* file = VSIFOpenL(uri.c_str(), "rb");
  if (file == nullptr) {
    return std::nullopt;
  }
  Sha256 hasher;
  const bool read = read_vsi_chunks(file, 4 << 20, [&](const unsigned char* data, size_t size) {
    hasher.update(data, size);
    return true;
  });
  VSIFCloseL(file);
  if (!read) {
    return std::nullopt;  // unreadable
  }
  return hasher.finish_hex();
}

// What is wrong with the row's output, or "" when nothing (check_output's work).
std::string find_fault(const LedgerRow& row, bool checksum, bool& checksum_missing, bool& unknown) {
  const std::string& uri = row.output_uri;
  const OutputFingerprint recorded = row.fingerprint.value_or(OutputFingerprint{});
  if (!is_vsi_path(uri)) {
    struct stat info {};
    if (stat(uri.c_str(), &info) != 0) {
      return "missing";
    }
    if (info.st_size != recorded.size) {
      return "size " + std::to_string(info.st_size) + " != recorded " +
             std::to_string(recorded.size);
    }
    const int64_t mtime_ns = mtime_ns_of(info);
    if (recorded.mtime_ns != 0 && mtime_ns != recorded.mtime_ns) {
      return "modified since completion (mtime_ns " + std::to_string(mtime_ns) + " != recorded " +
             std::to_string(recorded.mtime_ns) + ")";
    }
  } else if (is_object_store_path(uri)) {
    // Asked of the store now, as the driver's skip does (object_store.hpp).
    const ObjectLook look = look_at_object(uri, true);
    if (look.found == ObjectLook::Found::k_unknown) {
      unknown = true;
      return "could not be looked at: " + look.why;
    }
    if (look.found == ObjectLook::Found::k_missing) {
      return "missing";
    }
    const std::optional<ObjectHeaders> headers = look.headers;
    if (headers->size != recorded.size) {
      return "size " + std::to_string(headers->size) + " != recorded " +
             std::to_string(recorded.size);
    }
    if (recorded.etag &&
        match_object_etag(uri, *headers, *recorded.etag) == EtagMatch::k_different) {
      return "ETag " + (headers->etag.empty() ? std::string("(none)") : headers->etag) +
             " != recorded " + *recorded.etag;
    }
  } else {
    VSIStatBufL info;
    if (VSIStatL(uri.c_str(), &info) != 0) {
      return "missing";
    }
    if (info.st_size != recorded.size) {
      return "size " + std::to_string(static_cast<long long>(info.st_size)) + " != recorded " +
             std::to_string(recorded.size);
    }
  }
  if (checksum) {
    if (!recorded.sha256) {
      checksum_missing = true;
    } else {
      const auto digest = file_sha256(uri);
      if (!digest) {
        return "unreadable";
      }
      if (*digest != *recorded.sha256) {
        return "SHA-256 " + digest->substr(0, 12) + "... != recorded " +
               recorded.sha256->substr(0, 12) + "...";
      }
    }
  }
  CPLErrorReset();
  std::string refusal;
  GDALDatasetUniquePtr dataset;
  {
    CPLErrorHandlerPusher quiet(CPLQuietErrorHandler);
    dataset = open_output_for_check(uri, &refusal);
  }
  if (!refusal.empty()) {
    return refusal;
  }
  if (!dataset) {
    const std::string message = CPLGetLastErrorMsg();
    return "does not open in GDAL" + (message.empty() ? std::string() : ": " + message);
  }
  if (!output_members_unchanged(*dataset, uri, recorded)) {
    return "its files (sidecars) are not those recorded at completion";
  }
  // An output whose driver lays out its own grid (MBTiles) has its size and bands, not the work's.
  if (const auto grid = work_grid(row.work_json); grid && !grid->output_chooses_grid) {
    if (dataset->GetRasterXSize() != grid->x_size || dataset->GetRasterYSize() != grid->y_size) {
      return "size " + std::to_string(dataset->GetRasterXSize()) + "x" +
             std::to_string(dataset->GetRasterYSize()) + " != expected " +
             std::to_string(grid->x_size) + "x" + std::to_string(grid->y_size);
    }
    if (!grid->bands.empty() && dataset->GetRasterCount() != static_cast<int>(grid->bands.size())) {
      return std::to_string(dataset->GetRasterCount()) + " band(s) != expected " +
             std::to_string(grid->bands.size());
    }
  }
  return std::string();
}

// What is wrong with the row's output, or "" when nothing. `unknown` is set when the output
// could not be looked at (its store did not answer, or answered 403, 429 or 5xx, at the first
// look or at any later read): it is then neither missing nor changed, and its row stays.
std::string check_output(const LedgerRow& row, bool checksum, bool& checksum_missing,
                         bool& unknown) {
  std::string fault;
  try {
    fault = find_fault(row, checksum, checksum_missing, unknown);
  } catch (const StoreUnreachable& error) {
    unknown = true;
    return std::string("could not be looked at: ") + error.what();
  }
  if (!fault.empty() && !unknown && is_object_store_path(row.output_uri)) {
    // A read that failed after the first look (unreadable, does not open): asked again, so that
    // a store that stopped answering meanwhile does not cost the row.
    const ObjectLook again = look_at_object(row.output_uri, true);
    if (again.found == ObjectLook::Found::k_unknown) {
      unknown = true;
      return "could not be looked at: " + again.why;
    }
  }
  return fault;
}

}  // namespace

int run_verify(const Args& args, const GlobalOptions& global) {
  constexpr const char* k_synopsis =
      "usage: gdal-idem verify [--namespace N] [--layer L] [--checksum] [--dry-run]";
  Ledger::RowFilter filter;
  filter.state = RowState::k_completed;
  bool checksum = false;
  bool dry_run = false;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--namespace" && i + 1 < args.size()) {
      filter.namespace_name = label_argument("--namespace", args[++i]);
    } else if (args[i] == "--layer" && i + 1 < args.size()) {
      filter.layer = label_argument("--layer", args[++i]);
    } else if (args[i] == "--checksum") {
      checksum = true;
    } else if (args[i] == "--dry-run" || args[i] == "-n") {
      dry_run = true;
    } else {
      throw UsageError{"unknown argument '" + args[i] + "'; " + k_synopsis};
    }
  }
  auto ledger = dry_run ? open_ledger_read_only(global) : open_ledger(global);
  Progress progress(!global.quiet);
  // The total is only for the progress bar (one count query; skipped with -q).
  const int64_t total = global.quiet ? 0 : ledger->counts(filter).completed;
  filter.limit = ledger_page_rows();
  int64_t checked = 0;
  int64_t checksum_missing = 0;
  int64_t failed = 0;
  Spool failures;
  for (;;) {
    std::vector<LedgerRow> page = ledger->rows(filter);
    if (page.empty()) {
      break;
    }
    filter.after_work_key = page.back().work_key;
    for (const LedgerRow& row : page) {
      if (row.superseded_at) {
        continue;
      }
      ++checked;
      progress.update(static_cast<size_t>(checked), static_cast<size_t>(std::max(total, checked)));
      bool missing_checksum = false;
      bool unknown = false;
      const std::string problem = check_output(row, checksum, missing_checksum, unknown);
      checksum_missing += missing_checksum ? 1 : 0;
      if (problem.empty()) {
        continue;
      }
      // The row first (fenced on the completion we checked); the output is left for the rerun.
      // An output that could not be looked at keeps its row: "could not look" is never
      // "missing".
      const bool row_removed =
          !dry_run && !unknown && ledger->forget_completed(row.work_key, row.claim_token);
      if (global.json) {
        failures.write(std::string(failed == 0 ? "" : ",") +
                       json::object({{"key", json::str(row.work_key)},
                                     {"namespace", json::str(row.namespace_name)},
                                     {"output", json::str(row.output_uri)},
                                     {"problem", json::str(problem)},
                                     {"row_removed", json::boolean(row_removed)}}));
      } else {
        failures.write("FAIL " + row.work_key.substr(0, 12) + " " + row.output_uri + ": " +
                       problem + "; " +
                       (dry_run       ? "row kept (--dry-run)"
                        : unknown     ? "row kept: run verify again once it can be looked at"
                        : row_removed ? "row removed, the next run redoes the work"
                                      : "row changed meanwhile, left alone") +
                       "\n");
      }
      ++failed;
    }
    if (static_cast<int64_t>(page.size()) < *filter.limit) {
      break;
    }
  }
  progress.finish();

  if (global.json) {
    json::write_object_with_array(stdout,
                                  {{"checked", json::integer(checked)},
                                   {"checksum", json::boolean(checksum)},
                                   {"checksum_not_recorded", json::integer(checksum_missing)},
                                   {"dry_run", json::boolean(dry_run)},
                                   {"failed", json::integer(failed)},
                                   {"ok", json::integer(checked - failed)}},
                                  "failures", [&](std::FILE* out) { failures.copy_to(out); });
    std::printf("\n");
  } else {
    failures.copy_to(stdout);
    std::printf("verified %lld completed output(s): %lld ok, %lld failed\n",
                static_cast<long long>(checked), static_cast<long long>(checked - failed),
                static_cast<long long>(failed));
    if (checksum && checksum_missing > 0) {
      std::printf("%lld output(s) have no recorded SHA-256: their content was not checked\n",
                  static_cast<long long>(checksum_missing));
    }
  }
  return failed == 0 ? k_exit_ok : k_exit_problems;
}

}  // namespace idem::cli
