// SPDX-License-Identifier: MIT
// IdemCreator: waiting for another worker, skipping completed work, a dry run
// (idem_creator.hpp).
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "base/canonical_json.hpp"
#include "base/error.hpp"
#include "base/gdal_compat.hpp"
#include "base/held_messages.hpp"
#include "base/paths.hpp"
#include "base/progress.hpp"
#include "cpl_conv.h"
#include "cpl_string.h"
#include "creation_options.hpp"
#include "debug_report.hpp"
#include "gdal_priv.h"
#include "idem_creator.hpp"
#include "key/source_digest.hpp"
#include "key/work_key.hpp"
#include "ledger/ledger.hpp"
#include "output_datasets.hpp"
#include "store/object_store.hpp"
#include "vsiidem.hpp"
#include "work/atomic_output.hpp"
#include "work/claim_loop.hpp"
#include "work/lease.hpp"
#include "work/output_check.hpp"

namespace idem {

namespace {

// The metadata domain of a dry run's dataset: KEY, WORK (canonical JSON), DESTINATION.
constexpr const char* k_metadata_domain = "IDEM";

}  // namespace

// The claim found the work completed (`row`): the output it recorded, opened, when it is still
// there as recorded (a skip); else the completion is invalidated, with a warning saying why,
// and nullptr returned (the caller claims again and rebuilds).
GDALDataset* IdemCreator::skip_if_current(const LedgerRow& row, bool waited) {
  CPLDebug("IDEM", "completed row: output %s, recorded size %lld mtime_ns %lld",
           row.output_uri.c_str(),
           static_cast<long long>(row.fingerprint ? row.fingerprint->size : -1),
           static_cast<long long>(row.fingerprint ? row.fingerprint->mtime_ns : -1));
  std::string store_etag;
  GDALDatasetUniquePtr existing;
  if (completed_output_is_current(row, m_destination, &store_etag, &existing) &&
      // A format or creation options that choose the output's grid (MBTiles; TILING_SCHEME,
      // TARGET_SRS: COG's and GPKG's) choose it, not the work's, and so does gdalwarp when it runs
      // (GDALWarp() rounds a mosaic's extent its own way); a Zarr of several bands opens as a
      // container of arrays, without bands.
      (m_work.cog_grid || output_chooses_its_grid(m_options.format, m_options.passthrough) ||
       m_work.runs_gdalwarp || existing->GetRasterCount() == 0 ||
       (existing->GetRasterXSize() == m_work.grid.x_size &&
        existing->GetRasterYSize() == m_work.grid.y_size))) {
    if (!store_etag.empty() &&
        !m_ledger->replace_etag(m_work.key, row.claim_token, *row.fingerprint->etag, store_etag)) {
      CPLDebug("IDEM", "the row changed before the store's ETag could be recorded");
    }
    return skip(row,
                waited ? "completed by another worker while this one waited" : "already completed",
                existing.release());
  }
  existing.reset();
  if (!m_via_vsiidem && !fingerprint_of(m_destination)) {
    CPLError(CE_Warning, CPLE_AppDefined,
             "IDEM: this work was completed before, but GDAL deleted %s before calling the "
             "driver, so it is rebuilt. Write the output as /vsiidem/%s to make reruns skip.",
             m_destination.c_str(), m_destination.c_str());
  } else {
    CPLError(CE_Warning, CPLE_AppDefined,
             "IDEM: %s is missing or changed since this work was completed; rebuilding it.",
             m_destination.c_str());
  }
  m_ledger->invalidate(m_work.key, row.claim_token);
  m_invalidated = true;
  return nullptr;
}

// Another worker holds `holder`: with IDEM_ON_BUSY=FAIL this attempt fails naming it, else a
// warning says once what it waits for.
void IdemCreator::announce_busy(const LedgerRow& holder, bool other_work, bool& announced) {
  const std::string holder_text = describe_holder(holder);
  const std::string what =
      other_work ? "other work (key " + holder.work_key.substr(0, 12) + ") for the same output"
                 : std::string("this work");
  if (m_options.fail_when_busy) {
    throw WorkBusy("work " + m_work.key.substr(0, 12) + " for " + m_destination + ": " + what +
                   " is being done by " + holder_text + "; IDEM_ON_BUSY=FAIL");
  }
  if (!announced) {
    CPLError(CE_Warning, CPLE_AppDefined, "IDEM: waiting for %s, which holds %s",
             holder_text.c_str(), what.c_str());
    announced = true;
  }
}

// Two works on one output are serialised at their publish (docs/concepts.md): while other work
// claimed before this one holds a live claim on the same output, this attempt waits (renewing
// its own lease) or, with IDEM_ON_BUSY=FAIL, fails without publishing. Asked once the work is
// done, when the ledger's connection is free (a PostgreSQL claim's confirmation has been read).
void IdemCreator::wait_for_earlier_work(const LedgerRow& ours, LeaseKeeper& keeper) {
  bool announced = false;
  BusyBackoff backoff;
  while (const std::optional<LedgerRow> rival = earlier_claim_on_destination(ours)) {
    announce_busy(*rival, true, announced);
    keeper.poll();
    if (keeper.lost()) {
      throw ClaimLost(
          "the claim on this work was lost while it waited for "
          "other work on the same output; nothing was published");
    }
    backoff.wait(*rival);
  }
}

// A live claim of other work on the same output that came before `ours` (by claim time, then
// key: every worker orders two claims the same way, so exactly one of them goes on).
std::optional<LedgerRow> IdemCreator::earlier_claim_on_destination(const LedgerRow& ours) {
  const auto before = [&](const LedgerRow& row) {
    const double theirs = row.claimed_at.value_or(0);
    const double mine = ours.claimed_at.value_or(0);
    return theirs < mine || (theirs == mine && row.work_key < m_work.key);
  };
  for (LedgerRow& row : m_ledger->rows_on_output(m_destination, RowState::k_in_flight)) {
    if (row.work_key != m_work.key && !row.released_at && row.lease_left_seconds &&
        *row.lease_left_seconds > 0 && before(row)) {
      return std::move(row);
    }
  }
  return std::nullopt;
}

GDALDataset* IdemCreator::dry_run(const WorkDescription& work) {
  // A dry run must not let GDAL's deferred pre-delete remove an existing output, nor the
  // sidecars (.aux.xml, .ovr...) that the pre-delete recorded with it.
  if (vsiidem_unlink_pending(m_destination)) {
    vsiidem_cancel_unlink(m_destination);
    GDALDatasetUniquePtr existing;
    {
      // Looked at before it is opened: a FIFO planted beside it is never opened.
      CPLErrorHandlerPusher quiet(CPLQuietErrorHandler);
      existing = open_output_for_check(m_destination, nullptr);
    }
    CPLErrorReset();
    if (existing) {
      keep_dataset_files(existing.get());
    }
  }
  CPLError(CE_Warning, CPLE_AppDefined, "IDEM dry run: key=%s destination=%s", work.key.c_str(),
           m_destination.c_str());
  debug_report_set("OUTCOME", "DRY_RUN");
  result_report_set("OUTCOME", "DRY_RUN");
  result_report_set("KEY", work.key);
  // Hand GDAL an empty in-memory dataset of the right size: nothing is written anywhere. Its
  // metadata domain "IDEM" holds the report (docs/configuration.md, "Dry runs").
  auto* mem = GetGDALDriverManager()->GetDriverByName("MEM");
  GDALDataset* result = mem->Create("", std::max(1, work.grid.x_size),
                                    std::max(1, work.grid.y_size), 0, GDT_Byte, nullptr);
  if (result != nullptr) {
    result->SetMetadataItem("KEY", work.key.c_str(), k_metadata_domain);
    result->SetMetadataItem("WORK", work.canonical_json.c_str(), k_metadata_domain);
    result->SetMetadataItem("DESTINATION", m_destination.c_str(), k_metadata_domain);
  }
  return result;
}

GDALDataset* IdemCreator::skip(const LedgerRow& row, const char* why, GDALDataset* output) {
  // GDAL's pre-delete recorded every file of the dataset (sidecars too): keep them all. The
  // output was opened by its real path, since /vsiidem/ hides files whose unlink is pending.
  vsiidem_cancel_unlink(m_destination);
  keep_dataset_files(output);
  debug_report_set("OUTCOME", "SKIPPED");
  CPLDebug("IDEM", "timing: skip (open output) %.2f ms", lap_ms(m_lap));
  result_report_set("OUTCOME", "SKIPPED");
  result_report_set("ATTEMPT", std::to_string(row.attempt));
  std::vector<std::string> files{m_destination};
  if (row.fingerprint) {
    for (const RecordedMember& member :
         recorded_members(*row.fingerprint).value_or(std::vector<RecordedMember>())) {
      if (!member.tree) {
        files.push_back(member.path);
      }
    }
  }
  result_report_set("FILES", files_json(files));
  // A skip is the normal, successful case of a rerun: not a warning (docs/configuration.md, "The
  // result of a call"). Said on stderr with IDEM_VERBOSE=YES, and as a debug message.
  const std::string said = "skipped " + m_destination + ": " + why + " (key " +
                           row.work_key.substr(0, 12) + ", attempt " + std::to_string(row.attempt) +
                           ")";
  say_when_verbose(said);
  return output;
}

}  // namespace idem
