// SPDX-License-Identifier: MIT
// IdemCreator: the claimed attempt: write, publish under the claim, record the completion
// (idem_creator.hpp).
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <iterator>
#include <memory>
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
#include "gdalwarp_rules.hpp"
#include "idem_creator.hpp"
#include "key/source_digest.hpp"
#include "key/work_key.hpp"
#include "ledger/ledger.hpp"
#include "output_datasets.hpp"
#include "store/object_store.hpp"
#include "vsiidem.hpp"
#include "warp_engine.hpp"
#include "work/atomic_output.hpp"
#include "work/early_sync.hpp"
#include "work/lease.hpp"
#include "work/output_check.hpp"
#include "work/source_watch.hpp"
#include "work/takeover_recovery.hpp"

namespace idem {

namespace {

// How many times an object output is looked at again and uploaded when the store refuses its
// conditional upload while this attempt still holds its claim (see IdemCreator::create).
constexpr int k_upload_rounds = 3;

// Outputs from this many bytes of pixels up get an EarlySync, and a lease-renewal thread from the
// start.
constexpr double k_early_sync_min_bytes = 32.0 * 1024 * 1024;

// Bytes of pixels of a dataset, uncompressed: what a GTiff of it writes, roughly.
double raw_size_of(GDALDataset& dataset) {
  double bytes = 0;
  for (int i = 1; i <= dataset.GetRasterCount(); ++i) {
    bytes += GDALGetDataTypeSizeBytes(dataset.GetRasterBand(i)->GetRasterDataType());
  }
  return bytes * dataset.GetRasterXSize() * dataset.GetRasterYSize();
}

}  // namespace

// The fingerprint the completion records for what `output` published.
std::optional<OutputFingerprint> IdemCreator::published_fingerprint(
    const AtomicOutput& output, const std::vector<std::string>& published) const {
  std::optional<OutputFingerprint> fingerprint;
  if (!output.is_object()) {
    const std::vector<PublishedFile> placed = output.placed_files();
    for (const PublishedFile& file : placed) {
      if (file.path == m_destination) {
        fingerprint.emplace();
        fingerprint->size = file.size;
        fingerprint->mtime_ns = file.mtime_ns;
      }
    }
    if (!fingerprint) {
      throw Error(ErrorKind::k_internal, "the output " + m_destination + " was not published");
    }
    fingerprint->members = local_members_json(placed, m_destination);
    return fingerprint;
  }
  // An object's ETag is predicted from the bytes uploaded where the store allows it, which
  // saves asking the store for it (object_store.hpp); else it is asked.
  const std::optional<std::string> predicted =
      output.uploaded_primary() ? predicted_etag(m_destination, *output.uploaded_primary())
                                : std::nullopt;
  if (predicted) {
    fingerprint.emplace();
    fingerprint->size = output.uploaded_primary()->size;
    fingerprint->etag = predicted;
  } else {
    fingerprint = fingerprint_of(m_destination);
  }
  if (!fingerprint) {
    throw Error(ErrorKind::k_io, "the output " + m_destination +
                                     " vanished right after publishing (another process "
                                     "removed it): nothing was recorded; run the command again");
  }
  CPLStringList files;
  for (const std::string& file : published) {
    files.AddString(file.c_str());
  }
  fingerprint->members = output_members_json(m_destination, files.List());
  if (!fingerprint->members) {
    throw Error(ErrorKind::k_io,
                "a file of the output " + m_destination +
                    " vanished right after publishing (another process removed it): nothing "
                    "was recorded; run the command again");
  }
  return fingerprint;
}

// Writes the output into this attempt's temporary files through the FORMAT driver, renewing
// the claim as GDAL reports progress; the shape of an object output, for the dataset returned.
std::optional<OutputShape> IdemCreator::write_output(const WriteRequest& what, AtomicOutput& output,
                                                     LeaseKeeper& keeper, bool large) {
  ProgressRelay relay(what.progress, what.progress_data,
                      keeper.progress_check("during_write",
                                            "IDEM: the claim on this work was lost (lease expired "
                                            "and another worker took it over); aborting without "
                                            "publishing"));
  std::optional<OutputShape> shape;
  MaterialiseRequest request;
  request.source = what.source;
  request.format_driver = what.format_driver;
  request.output_path = output.temp_path();
  for (const auto& [key, value] : m_options.passthrough) {
    request.creation_options.SetNameValue(key.c_str(), value.c_str());
  }
  request.scratch_dir = output.temp_dir();
  request.kept_sources = &m_kept_sources;
  request.vrt_xml = &m_work.vrt_xml;
  request.prepared_warp = what.prepared_warp;
  if (m_cog.arguments) {
    m_gdalwarp_arguments.assign(m_cog.arguments->List(),
                                m_cog.arguments->List() + m_cog.arguments->size());
    request.gdalwarp_arguments = &m_gdalwarp_arguments;
    request.gdalwarp_sources = {m_cog.source};
  } else if (m_gdalwarp && m_work.runs_gdalwarp) {
    m_gdalwarp_arguments = m_gdalwarp->arguments();
    m_gdalwarp_arguments.emplace_back("-q");  // gdalwarp's own messages are the caller's
    request.gdalwarp_arguments = &m_gdalwarp_arguments;
    request.gdalwarp_sources = m_gdalwarp->open_sources(what.source);
  }
  request.progress = relay.function();
  request.progress_data = relay.data();
  // A large local output is synced while GDAL writes it, so the fsync of the commit does
  // not wait for all of it (see EarlySync). Tiles need no thread.
  std::unique_ptr<EarlySync> early_sync;
  if (m_options.durable && !output.is_object() && large) {
    early_sync = std::make_unique<EarlySync>(output.temp_path());
  }
  CPLDebug("IDEM", "timing: prepare %.2f ms", lap_ms(m_lap));
  MaterialiseReport report;
  request.report = &report;
  GDALDatasetUniquePtr written;
  try {
    written = materialise(request);
  } catch (const Error&) {
    if (keeper.lost()) {  // the progress check stopped GDAL
      throw ClaimLost(
          "the claim on this work was lost while the output was written (lease expired and "
          "another worker took it over); nothing was published");
    }
    throw;
  }
  if (report.warped) {
    debug_report_set("WARP_OPTIONS", report.ran_gdalwarp      ? "ARGUMENTS"
                                     : report.options_adopted ? "ADOPTED"
                                                              : "DESERIALISED");
    debug_report_set("WARP_RUN_BY", report.ran_gdalwarp        ? "GDALWARP"
                                    : report.copied_vrt        ? "VRT_COPY"
                                    : report.ran_vrt_operation ? "VRT_OPERATION"
                                                               : "OWN_OPERATION");
    debug_report_set("WARP_SOURCE", report.kept_source  ? "KEPT"
                                    : report.copied_vrt ? "VRT"
                                                        : "OPENED");
  }
  // GDAL 3.6 has no GDALDataset::Close(): flush, close, and look for errors raised doing so
  // (a full disk shows up here).
  CPLErrorReset();
  written->FlushCache(true);
  if (output.is_object()) {
    shape = shape_of(*written);
  }
  written.reset();
  early_sync.reset();
  if (CPLGetLastErrorType() == CE_Failure) {
    throw Error(ErrorKind::k_io, std::string("writing the output failed: ") + CPLGetLastErrorMsg());
  }
  name_output_in_header(what.format_driver, output, m_given_name);
  return shape;
}

// Publishes the written files once the claim is confirmed and held (docs/concepts.md): every
// file this attempt published.
std::vector<std::string> IdemCreator::publish_under_claim(const ClaimResult& claim,
                                                          AtomicOutput& output,
                                                          LeaseKeeper& keeper) {
  const std::string& token = claim.claim_token;
  // On object storage the store fences the publish too: each upload is conditional on the
  // object looked at here, before the claim is checked below, so the store refuses it once
  // another worker has uploaded there since (which it can do only after this attempt's claim
  // was lost). A refusal while the claim still holds (the writer was a worker whose claim is
  // gone, or a writer outside IDEM) means: look again and upload over it, a few times.
  for (int round = 1;; ++round) {
    output.observe_objects();
    // Nothing is published under a claim the ledger could still lose (docs/ledger.md): the
    // claim committed without waiting for its flush, which was asked for while the work ran.
    // Before the lease's check, which then follows any long wait for it.
    if (round == 1) {
      test_pause("before_confirm");
    }
    if (!m_ledger->confirm_claim(m_work.key, token)) {
      throw ClaimLost(
          "the ledger no longer has the claim on this work (a crash of its database "
          "server lost it, or it was forgotten), so nothing was published; run again");
    }
    if (round == 1) {
      wait_for_earlier_work(claim.row, keeper);
    }
    // Renewed unless the claim or the last renewal is recent (a tile: no ledger write).
    if (!keeper.ensure_held()) {
      throw ClaimLost(
          "the claim on this work was lost before publishing "
          "(lease expired and another worker took it over)");
    }
    keeper.poll();  // the upload or rename reports no progress
    test_pause("before_commit");
    m_source_watch.check();  // the pixels are of the sources the key names (invariant I3)
    if (round == 1) {
      output.retire_with_publish(members_to_retire());
    }
    // The new files replace what GDAL's pre-delete recorded; a file of the replaced output
    // that the new one does not have (a stale sidecar) is removed now, before the completion.
    try {
      // Local files: each is exchanged with the file it replaces, which is kept until the
      // fenced completion below is recorded (settle) or refused (roll_back).
      return output.publish(m_options.durable);
    } catch (const UploadRefused& refused) {
      if (round == k_upload_rounds) {
        throw Error(ErrorKind::k_ledger,
                    std::string(refused.what()) + ", " + std::to_string(k_upload_rounds) +
                        " times in a row; no completion is recorded, run again");
      }
      CPLDebug("IDEM", "%s; looking again", refused.what());
    } catch (const Error&) {
      if (output.temp_dir_removed()) {
        throw ClaimLost(
            "the claim on this work was lost before publishing: another worker took "
            "it over (lease expired) and removed this attempt's temporary files; "
            "nothing was published");
      }
      throw;
    }
  }
}

// Records the completion, fenced by the claim's token, of what this attempt published; takes it
// back when the completion is refused or another worker's output replaced it meanwhile.
void IdemCreator::record_completion(const std::string& token, AtomicOutput& output,
                                    const LeaseKeeper& keeper,
                                    const std::vector<std::string>& published) {
  // An object's ETag is predicted from the bytes uploaded where the store allows it, which
  // saves asking the store for it (object_store.hpp); else it is asked.
  // The fingerprint of this attempt's own files (sidecars included, each checked by every
  // later skip): taken from what publish() put in place, never from what the final path holds
  // by the time it is asked, which may be another worker's by then.
  const std::optional<OutputFingerprint> fingerprint = published_fingerprint(output, published);
  test_pause("before_complete");
  const char* const replaced =
      "another worker's output replaced this attempt's at the final path before its "
      "completion was recorded (this attempt's lease had run out), so no completion is "
      "recorded for it; run again";
  // Another worker may have published at this output while this attempt's lease was out:
  // locally a look at the inodes (free); on object storage a request, made only then.
  const auto replaced_meanwhile = [&] {
    return !output.still_in_place() || (output.is_object() && keeper.lapsed() &&
                                        !output_matches(m_destination, *fingerprint, nullptr));
  };
  if (replaced_meanwhile()) {
    throw ClaimLost(replaced);
  }
  try {
    m_source_watch.check();  // once more, just before the completion (invariant I3)
  } catch (const Error&) {
    take_back(output, *fingerprint);
    throw;
  }
  if (!complete_through_reconnects(*m_ledger, m_work.key, token, *fingerprint, m_options.lease)) {
    // Fenced: this attempt's files do not stay where another worker's completion is recorded.
    take_back(output, *fingerprint);
    throw ClaimLost(
        "the claim on this work had been taken over by another worker, so this "
        "attempt's completion was refused and what it published was taken back; that "
        "worker records the work");
  }
  if (replaced_meanwhile()) {
    // Replaced in the instant between the look above and the completion: withdrawn.
    m_ledger->invalidate(m_work.key, token);
    throw ClaimLost(replaced);
  }
  if (!output.is_object()) {
    output.settle();
  }
}

// The files of the completed outputs recorded at this destination other than their primary (their
// sidecars), for the publish to move aside where the new output has no file of that name: a
// later work's publish leaves no sidecar of an earlier one's beside its primary (invariant I3),
// even when that work published after GDAL's pre-delete of this call looked. Asked only when
// something is at the destination now (a first write costs no query).
std::vector<KnownFile> IdemCreator::members_to_retire() const {
  if (is_object_store_path(m_destination) || !look_without_following(m_destination)) {
    return {};
  }
  return recorded_local_files(*m_ledger, m_destination, false);
}

// What this attempt published, taken back before it is recorded: an object it uploaded is
// removed unless a completion records those bytes; local files are exchanged back.
void IdemCreator::take_back(AtomicOutput& output, const OutputFingerprint& fingerprint) {
  if (output.is_object()) {
    remove_own_object(*m_ledger, m_destination, fingerprint);
  } else {
    output.roll_back();
  }
}

GDALDataset* IdemCreator::run_claimed(const ClaimResult& claim,
                                      LeaseKeeper::Clock::time_point claim_sent,
                                      const WriteRequest& what) {
  const std::string& token = claim.claim_token;
  std::vector<std::string> published;
  std::optional<OutputShape> shape;  // of an object output
  bool replaced = false;             // an output was at the destination
  CPLDebug("IDEM", "claimed %s (attempt %lld)", m_work.key.c_str(),
           static_cast<long long>(claim.attempt));
  try {
    m_source_watch.check_held_files();  // invariant I3, before a pixel is read
    // The directory carries the work's mark: a later worker that takes this work over removes
    // it, as this one removes those of the attempts it replaced.
    const std::string owner = m_work.key.substr(0, 16);
    AtomicOutput output(
        m_destination, temp_token(token, owner),
        m_output_dir ? std::optional<DirectoryHandle>(m_output_dir->duplicate()) : std::nullopt);
    if (m_recorded_tree) {
      output.allow_replacing_directory(*m_recorded_tree);
    }
    if (claim.attempt > 1) {
      const int removed =
          remove_abandoned_temp_dirs(output.directory(), owner, output.temp_name(),
                                     recorded_local_files(*m_ledger, m_destination, true));
      if (removed > 0) {
        CPLDebug("IDEM", "removed %d temporary directories of earlier attempts", removed);
      }
    }
    // Large work renews from a thread of its own from the start; the rest starts it only once
    // it has run for a second (lease.hpp), so a tile never has a second thread.
    const bool large = raw_size_of(*what.source) >= k_early_sync_min_bytes;
    LeaseKeeper keeper(*m_ledger, m_work.key, token, m_options.lease, claim_sent,
                       large ? LeaseKeeper::Start::k_now : LeaseKeeper::Start::k_when_work_is_long);
    shape = write_output(what, output, keeper, large);
    const double write_ms = lap_ms(m_lap);
    CPLDebug("IDEM", "timing: materialise %.2f ms", write_ms);
    result_report_set("WRITE_MS", milliseconds_text(write_ms));
    published = publish_under_claim(claim, output, keeper);
    m_pre_delete.published(published);
    CPLDebug("IDEM", "timing: heartbeat+commit %.2f ms", lap_ms(m_lap));
    replaced = output.replaced_an_output();  // asked before settle() forgets it
    record_completion(token, output, keeper, published);
    debug_report_set("LEASE_RENEWAL_THREAD", keeper.started() ? "STARTED" : "NOT_STARTED");
  } catch (...) {
    try {
      m_ledger->release(m_work.key, token);
    } catch (const Error& error) {
      CPLDebug("IDEM", "releasing the claim failed: %s", error.what());
    }
    throw;
  }
  CPLDebug("IDEM", "timing: complete %.2f ms", lap_ms(m_lap));
  debug_report_set("OUTCOME", "WRITTEN");
  debug_report_set("ATTEMPT", std::to_string(claim.attempt));
  result_report_set("OUTCOME", replaced || m_invalidated ? "REBUILT" : "BUILT");
  result_report_set("ATTEMPT", std::to_string(claim.attempt));
  std::vector<std::string> files{m_destination};  // the primary first, then its sidecars
  std::copy_if(published.begin(), published.end(), std::back_inserter(files),
               [&](const std::string& file) { return file != m_destination; });
  result_report_set("FILES", files_json(files));
  say_when_verbose(std::string(replaced || m_invalidated ? "rebuilt " : "built ") + m_destination +
                   " (key " + m_work.key.substr(0, 12) + ", attempt " +
                   std::to_string(claim.attempt) + ")");
  test_pause("after_complete");
  GDALDataset* opened = shape ? new_deferred_output(m_destination, published, std::move(*shape))
                              : open_output(m_destination, &published);
  CPLDebug("IDEM", "timing: open output %.2f ms", lap_ms(m_lap));
  return opened;
}

}  // namespace idem
