// gdal-idem verify [--namespace N] [--checksum]: every completed (not superseded) row's output
// exists, matches its recorded fingerprint (size and mtime_ns locally; size and ETag on object
// stores; the SHA-256 with --checksum) and opens in GDAL with the recorded size and band count.
// A failing row is removed (the row only, fenced on the completion that was checked) so the next
// run redoes the work.
#include <sys/stat.h>

#include <cstdio>

#include "cli.hpp"
#include "cli_util.hpp"
#include "core/sha256.hpp"
#include "cpl_error.h"
#include "cpl_string.h"
#include "cpl_vsi.h"
#include "gdal_priv.h"

namespace idem::cli {

namespace {

struct Finding {
  LedgerRow row;
  std::string problem;     // empty when the output is fine
  bool checksum_missing = false;
  bool row_removed = false;
};

bool is_virtual(const std::string& uri) { return uri.rfind("/vsi", 0) == 0; }

std::optional<std::string> file_sha256(const std::string& uri) {
  VSILFILE* file = VSIFOpenL(uri.c_str(), "rb");
  if (file == nullptr) {
    return std::nullopt;
  }
  Sha256 hasher;
  std::vector<char> buffer(4 << 20);
  size_t got = 0;
  while ((got = VSIFReadL(buffer.data(), 1, buffer.size(), file)) > 0) {
    hasher.update(buffer.data(), got);
  }
  VSIFCloseL(file);
  return hasher.finish_hex();
}

std::optional<std::string> object_etag(const std::string& uri) {
  const CPLStringList headers(VSIGetFileMetadata(uri.c_str(), "HEADERS", nullptr));
  for (const char* name : {"ETag", "etag", "Etag"}) {
    if (const char* value = headers.FetchNameValue(name)) {
      return std::string(value);
    }
  }
  return std::nullopt;
}

// What is wrong with the row's output, or "" when nothing.
std::string check_output(const LedgerRow& row, bool checksum, bool& checksum_missing) {
  const std::string& uri = row.output_uri;
  const OutputFingerprint recorded = row.fingerprint.value_or(OutputFingerprint{});
  if (!is_virtual(uri)) {
    struct stat info {};
    if (stat(uri.c_str(), &info) != 0) {
      return "missing";
    }
    if (info.st_size != recorded.size) {
      return "size " + std::to_string(info.st_size) + " != recorded " +
             std::to_string(recorded.size);
    }
    const int64_t mtime_ns = int64_t(info.st_mtim.tv_sec) * 1000000000 + info.st_mtim.tv_nsec;
    if (recorded.mtime_ns != 0 && mtime_ns != recorded.mtime_ns) {
      return "modified since completion (mtime_ns " + std::to_string(mtime_ns) +
             " != recorded " + std::to_string(recorded.mtime_ns) + ")";
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
    if (recorded.etag) {
      const auto etag = object_etag(uri);
      if (etag && *etag != *recorded.etag) {
        return "ETag " + *etag + " != recorded " + *recorded.etag;
      }
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
  CPLPushErrorHandler(CPLQuietErrorHandler);
  GDALDatasetUniquePtr dataset(
      GDALDataset::Open(uri.c_str(), GDAL_OF_RASTER | GDAL_OF_READONLY, nullptr, nullptr,
                        nullptr));
  CPLPopErrorHandler();
  if (!dataset) {
    const std::string message = CPLGetLastErrorMsg();
    return "does not open in GDAL" + (message.empty() ? std::string() : ": " + message);
  }
  if (const auto grid = work_grid(row.work_json)) {
    if (dataset->GetRasterXSize() != grid->x_size || dataset->GetRasterYSize() != grid->y_size) {
      return "size " + std::to_string(dataset->GetRasterXSize()) + "x" +
             std::to_string(dataset->GetRasterYSize()) + " != expected " +
             std::to_string(grid->x_size) + "x" + std::to_string(grid->y_size);
    }
    if (grid->band_count > 0 && dataset->GetRasterCount() != grid->band_count) {
      return std::to_string(dataset->GetRasterCount()) + " band(s) != expected " +
             std::to_string(grid->band_count);
    }
  }
  return std::string();
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
      filter.namespace_name = args[++i];
    } else if (args[i] == "--layer" && i + 1 < args.size()) {
      filter.layer = args[++i];
    } else if (args[i] == "--checksum") {
      checksum = true;
    } else if (args[i] == "--dry-run" || args[i] == "-n") {
      dry_run = true;
    } else {
      throw UsageError{"unknown argument '" + args[i] + "'; " + k_synopsis};
    }
  }
  auto ledger = open_ledger(global);
  std::vector<LedgerRow> rows = ledger->rows(filter);
  Progress progress(!global.quiet);
  int64_t checked = 0;
  int64_t checksum_missing = 0;
  std::vector<Finding> failures;
  for (size_t i = 0; i < rows.size(); ++i) {
    progress.update(i, rows.size());
    LedgerRow& row = rows[i];
    if (row.superseded_at) {
      continue;
    }
    ++checked;
    Finding finding;
    finding.problem = check_output(row, checksum, finding.checksum_missing);
    checksum_missing += finding.checksum_missing ? 1 : 0;
    if (finding.problem.empty()) {
      continue;
    }
    // The row first (fenced on the completion we checked); the output is left for the rerun.
    finding.row_removed = !dry_run && ledger->forget_completed(row.work_key, row.claim_token);
    finding.row = std::move(row);
    failures.push_back(std::move(finding));
  }
  progress.finish();

  if (global.json) {
    std::vector<std::string> items;
    for (const Finding& finding : failures) {
      items.push_back(json::object({{"key", json::str(finding.row.work_key)},
                                    {"namespace", json::str(finding.row.namespace_name)},
                                    {"output", json::str(finding.row.output_uri)},
                                    {"problem", json::str(finding.problem)},
                                    {"row_removed", json::boolean(finding.row_removed)}}));
    }
    std::printf("%s\n",
                json::object({{"checked", json::integer(checked)},
                              {"checksum", json::boolean(checksum)},
                              {"checksum_not_recorded", json::integer(checksum_missing)},
                              {"dry_run", json::boolean(dry_run)},
                              {"failed", json::integer(static_cast<int64_t>(failures.size()))},
                              {"failures", json::array(items)},
                              {"ok", json::integer(checked - int64_t(failures.size()))}})
                    .c_str());
  } else {
    for (const Finding& finding : failures) {
      std::printf("FAIL %s %s: %s; %s\n", finding.row.work_key.substr(0, 12).c_str(),
                  finding.row.output_uri.c_str(), finding.problem.c_str(),
                  dry_run ? "row kept (--dry-run)"
                  : finding.row_removed
                      ? "row removed, the next run redoes the work"
                      : "row changed meanwhile, left alone");
    }
    std::printf("verified %lld completed output(s): %lld ok, %zu failed\n",
                static_cast<long long>(checked),
                static_cast<long long>(checked - int64_t(failures.size())), failures.size());
    if (checksum && checksum_missing > 0) {
      std::printf("%lld output(s) have no recorded SHA-256: their content was not checked\n",
                  static_cast<long long>(checksum_missing));
    }
  }
  return failures.empty() ? k_exit_ok : k_exit_problems;
}

}  // namespace idem::cli
