// SPDX-License-Identifier: MIT
// The IDEM raster driver: CreateCopy only. describe -> key -> look up -> skip / wait / claim ->
// materialise into a temporary directory -> commit (fsync + rename) -> fenced completion.
#include "idem_driver.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/canonical_json.hpp"
#include "base/error.hpp"
#include "base/gdal_compat.hpp"
#include "base/held_messages.hpp"
#include "base/object_store.hpp"
#include "base/paths.hpp"
#include "base/progress.hpp"
#include "cog_warp.hpp"
#include "cpl_conv.h"
#include "cpl_string.h"
#include "creation_options.hpp"
#include "debug_report.hpp"
#include "driver_ledgers.hpp"
#include "gdal_priv.h"
#include "gdal_proxy.h"
#include "gdalwarp_rules.hpp"
#include "key/source_digest.hpp"
#include "key/tile_grid.hpp"
#include "key/work_key.hpp"
#include "ledger/ledger.hpp"
#include "ogr_spatialref.h"
#include "output_datasets.hpp"
#include "vrtdataset.h"
#include "vsiidem.hpp"
#include "warp_engine.hpp"
#include "work/atomic_output.hpp"
#include "work/destination_guard.hpp"
#include "work/lease.hpp"
#include "work/output_check.hpp"
#include "work/source_watch.hpp"

namespace idem {

namespace {

// The metadata domain of a dry run's dataset: KEY, WORK (canonical JSON), DESTINATION.
constexpr const char* k_metadata_domain = "IDEM";
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

// Lap timer for the "timing:" debug lines (--debug on; bench/ reads them): ms since the last lap.
double lap_ms(std::chrono::steady_clock::time_point& lap) {
  const auto now = std::chrono::steady_clock::now();
  const double ms = std::chrono::duration<double, std::milli>(now - lap).count();
  lap = now;
  return ms;
}

// A duration in the RESULT domain: milliseconds, two decimals.
std::string milliseconds_text(double ms) {
  return CPLSPrintf("%.2f", ms);
}

// The FILES item of the RESULT domain: a JSON array of the output's files, the primary first.
std::string files_json(const std::vector<std::string>& files) {
  JsonValue::Array items;
  for (const std::string& file : files) {
    items.push_back(JsonValue::string(file));
  }
  return JsonValue::array(std::move(items)).dump();
}

// The ERROR_KIND item of the RESULT domain for a failed call (docs/configuration.md).
const char* error_kind_name(const Error& error) {
  if (dynamic_cast<const WorkBusy*>(&error) != nullptr) {
    return "BUSY";
  }
  if (dynamic_cast<const ClaimLost*>(&error) != nullptr) {
    return "LOST_CLAIM";
  }
  if (dynamic_cast<const DestinationRefused*>(&error) != nullptr) {
    return "REFUSED_DESTINATION";
  }
  if (dynamic_cast<const LedgerUnreachable*>(&error) != nullptr) {
    return "LEDGER_UNREACHABLE";
  }
  switch (error.kind()) {
    case ErrorKind::k_usage:
      return "USAGE";
    case ErrorKind::k_source:
      return "SOURCE";
    case ErrorKind::k_ledger:
      return "LEDGER";
    case ErrorKind::k_io:
      return "IO";
    case ErrorKind::k_internal:
      break;
  }
  return "INTERNAL";
}

// What a call did, on stderr as "IDEM: <message>" when the user asks (IDEM_VERBOSE=YES), else
// as a debug message (CPL_DEBUG=IDEM), which reads the same: success is not a warning.
void say_when_verbose(const std::string& message) {
  if (CPLTestBool(CPLGetConfigOption("IDEM_VERBOSE", "NO"))) {
    std::fprintf(stderr, "IDEM: %s\n", message.c_str());
    std::fflush(stderr);
  } else {
    CPLDebug("IDEM", "%s", message.c_str());
  }
}

// The warp's options read ahead (prepare_warp) while the ledger answers the claim. GDAL's
// warnings and errors are held back: replayed when it succeeds, dropped when it fails, since the
// warp then reads the options again after the claim and reports the failure where it belongs.
PreparedWarpPtr prepare_warp_ahead(GDALDataset* source, const std::string* vrt_xml,
                                   const KeptSources* kept_sources) {
  HeldMessages held;
  PreparedWarpPtr warp;
  try {
    warp = prepare_warp(source, vrt_xml, kept_sources);
  } catch (const Error& error) {
    CPLDebug("IDEM", "reading the warp options ahead failed (read again after the claim): %s",
             error.what());
  }
  if (warp) {
    held.replay();
    CPLDebug("IDEM", "warp options read while the ledger answered the claim");
  }
  return warp;
}

// ---------------------------------------------------------------------------------------------
// The creator: one CreateCopy call.

class IdemCreator {
 public:
  explicit IdemCreator(PreDelete& pre_delete) : m_pre_delete(pre_delete) {}
  // Reports the ledger's stats (_DEBUG_ metadata), whatever the outcome.
  ~IdemCreator();
  IdemCreator(const IdemCreator&) = delete;
  IdemCreator& operator=(const IdemCreator&) = delete;
  GDALDataset* create(const char* filename, GDALDataset* source, CSLConstList creation_options,
                      GDALProgressFunc progress, void* progress_data);

 private:
  void read_gdalwarp_command(GDALDataset* source, GDALDriver* format_driver,
                             KeyOptions& key_options);
  void set_destination(const char* filename, GDALDriver* format_driver);
  void check_the_work() const;
  DestinationRules destination_rules(const std::vector<SourceFile>& source_files) const;
  ClaimRequest claim_request() const;
  GDALDataset* skip_if_current(const LedgerRow& row, bool waited);
  GDALDataset* dry_run(const WorkDescription& work);
  GDALDataset* skip(const LedgerRow& row, const char* why, GDALDataset* output);
  std::optional<LedgerRow> earlier_claim_on_destination(const LedgerRow& ours);
  void announce_busy(const LedgerRow& holder, bool other_work, bool& announced);
  void wait_for_earlier_work(const LedgerRow& ours, LeaseKeeper& keeper);
  std::optional<OutputFingerprint> published_fingerprint(
      const AtomicOutput& output, const std::vector<std::string>& published) const;
  // What the claimed attempt writes, and where GDAL's progress goes.
  struct WriteRequest {
    GDALDataset* source = nullptr;
    GDALDriver* format_driver = nullptr;
    PreparedWarp* prepared_warp = nullptr;
    GDALProgressFunc progress = nullptr;
    void* progress_data = nullptr;
  };
  GDALDataset* run_claimed(const ClaimResult& claim, LeaseKeeper::Clock::time_point claim_sent,
                           const WriteRequest& what);
  std::optional<OutputShape> write_output(const WriteRequest& what, AtomicOutput& output,
                                          LeaseKeeper& keeper, bool large);
  std::vector<std::string> publish_under_claim(const ClaimResult& claim, AtomicOutput& output,
                                               LeaseKeeper& keeper);
  void record_completion(const std::string& token, AtomicOutput& output, const LeaseKeeper& keeper,
                         const std::vector<std::string>& published);
  void take_back(AtomicOutput& output, const OutputFingerprint& fingerprint);
  std::vector<KnownFile> members_to_retire() const;

  PreDelete& m_pre_delete;
  IdemOptions m_options;
  std::string m_destination;                // absolute real path
  std::string m_given_name;                 // the output as the caller named it, without /vsiidem/
  std::optional<std::string> m_unwritable;  // why the destination's directory takes no file
  bool m_via_vsiidem = false;
  WorkerLedger* m_ledger = nullptr;  // shared_ledger(): lives for the process
  WorkDescription m_work;
  KeptSources m_kept_sources;  // opened for the key, reused by the warp
  SourceWatch m_source_watch;  // the key's local source files, as they were read (invariant I3)
  CogWarpPlan m_cog;           // a warp into COG run as gdalwarp -of COG runs it (cog_warp.hpp)
  // The gdalwarp program's command, for what it hands IDEM without its options
  // (gdalwarp_rules.hpp).
  std::unique_ptr<GdalwarpCommand> m_gdalwarp;
  std::vector<std::string> m_gdalwarp_arguments;  // what GDALWarp() runs with, when it runs
  std::chrono::steady_clock::time_point m_lap = std::chrono::steady_clock::now();
  // A completion of this work was found with its output missing or changed, and withdrawn.
  bool m_invalidated = false;
};

IdemCreator::~IdemCreator() {
  if (m_ledger != nullptr) {
    const LedgerStats stats = m_ledger->stats();
    debug_report_set("LEDGER_CONNECTIONS", std::to_string(stats.connections));
    debug_report_set("LEDGER_CONNECTIONS_OPENED_AHEAD",
                     std::to_string(stats.connections_opened_ahead));
    debug_report_set("LEDGER_CLAIMS_CONFIRMED_BY_REWRITE",
                     std::to_string(stats.claims_confirmed_by_rewrite));
    debug_report_set("LEDGER_STATEMENTS_FOUND_PREPARED",
                     std::to_string(stats.statements_found_prepared));
  }
}

GDALDataset* IdemCreator::create(const char* filename, GDALDataset* source,
                                 CSLConstList creation_options, GDALProgressFunc progress,
                                 void* progress_data) {
  if (progress == nullptr) {
    progress = GDALDummyProgress;
  }
  m_options = parse_options(creation_options);
  refuse_updating_options(m_options.passthrough);
  GDALDriver* format_driver = find_format_driver(m_options.format);
  CPLStringList passthrough;
  for (const auto& [key, value] : m_options.passthrough) {
    passthrough.SetNameValue(key.c_str(), value.c_str());
  }
  // Unknown options for the real driver are reported the way GDAL reports them for any driver.
  GDALValidateCreationOptions(format_driver, passthrough.List());

  set_destination(filename, format_driver);
  result_report_set("OUTPUT", m_destination);

  KeyOptions key_options;
  key_options.namespace_name = m_options.namespace_name;
  key_options.format = format_driver->GetDescription();
  key_options.creation_options = m_options.passthrough;
  key_options.destination = m_destination;
  key_options.digest_policy = m_options.digest_policy;
  key_options.include_gdal_version = m_options.include_gdal_version;
  read_gdalwarp_command(source, format_driver, key_options);

  const std::vector<GDALDataset*> read_through = datasets_read_through(source);
  write_pending_changes_of_sources(read_through);
  keep_sources_without_files(source, read_through, m_kept_sources);
  if (m_options.dry_run) {
    // A dry run hashes its sources into memory, unless told to look digests up in the ledger's
    // persistent cache (`gdal-idem pending` does: a source the real runs hashed is not hashed
    // again). It records none there: the ledger is opened read-only (invariant I4).
    InMemoryDigestCache cache;
    key_options.digest_cache = &cache;
    if (EQUAL(CPLGetConfigOption("IDEM_DRY_RUN_DIGEST_CACHE", "MEMORY"), "LEDGER")) {
      key_options.digest_cache = &shared_lookup_digest_cache(m_options.ledger_dsn);
    }
    m_work = describe_work(source, key_options);
    return dry_run(m_work);
  }

  CPLDebug("IDEM", "timing: options %.2f ms", lap_ms(m_lap));
  m_ledger = &shared_ledger(m_options.ledger_dsn);
  CPLDebug("IDEM", "timing: ledger open %.2f ms", lap_ms(m_lap));
  CountingDigestCache digest_cache(m_ledger->digest_cache());
  key_options.digest_cache = &digest_cache;
  key_options.kept_sources = &m_kept_sources;
  std::vector<SourceFile> source_files;
  key_options.source_files = &source_files;
  m_work = describe_work(source, key_options);
  digest_cache.report();
  result_report_set("KEY", m_work.key);
  check_destination(m_destination, destination_rules(source_files));
  if (m_work.is_warp && EQUAL(format_driver->GetDescription(), "COG") && !m_work.runs_gdalwarp) {
    m_cog = plan_cog_warp(source, m_work, m_kept_sources, [&](const std::string& xml) {
      return canonical_vrt_text(xml, key_options);
    });
    if (m_cog.arguments && !m_work.cog_warp) {  // re-keyed: it runs otherwise than before
      key_options.warp_as_gdalwarp_cog = true;
      m_work = describe_work(source, key_options);
    }
  }
  const double key_ms = lap_ms(m_lap);
  CPLDebug("IDEM", "timing: describe+digest+key %.2f ms", key_ms);
  result_report_set("KEY_MS", milliseconds_text(key_ms));
  result_report_set("KEY", m_work.key);  // re-keyed above for a warp run as gdalwarp -of COG
  m_source_watch = SourceWatch(source_files);
  check_the_work();
  ClaimRequest request = claim_request();

  // A warp's options are read while a PostgreSQL ledger answers the first claim (cheap when they
  // come with the VRT's transformer; PROJ's work when it is rebuilt, bench/RESULTS.md), unless GDAL
  // found an output at the destination: the answer is then likely "completed", and the reading
  // would be wasted.
  PreparedWarpPtr prepared_warp;
  bool read_warp_ahead = m_work.is_warp && !m_work.cog_warp && !m_work.runs_gdalwarp &&
                         !EQUAL(format_driver->GetDescription(), "VRT") &&
                         !vsiidem_unlink_pending(m_destination);
  const std::function<void()> read_warp = [&] {
    prepared_warp = prepare_warp_ahead(source, &m_work.vrt_xml, &m_kept_sources);
  };

  if (m_unwritable) {
    // Only a skip can succeed, and it needs no write access: no claim is made for work that
    // cannot be written.
    const LedgerRow row = m_ledger->lookup(m_work.key);
    if (row.state == RowState::k_completed) {
      if (GDALDataset* output = skip_if_current(row, false)) {
        return output;
      }
    }
    throw DestinationRefused(*m_unwritable);
  }
  bool announced_wait = false;
  double wait_backoff = 0.05;  // seconds
  for (;;) {
    request.claim_token = new_claim_token();
    const auto claim_sent = LeaseKeeper::Clock::now();
    const ClaimResult claim = read_warp_ahead ? m_ledger->claim_unless_completed(request, read_warp)
                                              : m_ledger->claim_unless_completed(request);
    if (m_work.is_warp) {
      debug_report_set("WARP_OPTIONS_READ_AHEAD", prepared_warp ? "YES" : "NO");
    }
    read_warp_ahead = false;
    CPLDebug("IDEM", "timing: claim %.2f ms", lap_ms(m_lap));
    if (claim.outcome == ClaimOutcome::k_claimed) {
      return run_claimed(
          claim, claim_sent,
          WriteRequest{source, format_driver, prepared_warp.get(), progress, progress_data});
    }
    if (claim.outcome == ClaimOutcome::k_completed) {
      if (GDALDataset* output = skip_if_current(claim.row, announced_wait)) {
        return output;
      }
      continue;  // invalidated: claimed again
    }
    const LedgerRow& holder = claim.row;
    announce_busy(holder, false, announced_wait);
    // Back off from 50 ms to 1 s: short tiles finish within a few polls, long work costs the
    // ledger one claim attempt a second. Never sleep past the holder's lease.
    const double left = holder.lease_left_seconds.value_or(1.0);
    const double pause = std::clamp(std::min(wait_backoff, left), 0.05, 1.0);
    wait_backoff = std::min(wait_backoff * 2, 1.0);
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int>(pause * 1000)));
  }
}

// gdalwarp hands a driver without Create its plain mosaic of several sources as gdalbuildvrt's
// VRT, without the options it applies when it writes a format with Create itself (all but VRT and
// COG, which it writes from a copy, unless COG's grid options make it warp), and its other warps
// of several sources as the temporary file it warped them into, not onto a COG's grid: where the
// process is the gdalwarp program, its command line is read, and the output is written as
// gdalwarp writes it (docs/internals.md §12), keyed with its options.
void IdemCreator::read_gdalwarp_command(GDALDataset* source, GDALDriver* format_driver,
                                        KeyOptions& key_options) {
  const char* const format = format_driver->GetDescription();
  const bool is_cog = EQUAL(format, "COG");
  const bool cog_grid = is_cog && cog_grid_options_in(m_options.passthrough);
  // A format gdalwarp writes with Create itself (COG and VRT it writes from a copy).
  const bool created_by_gdalwarp = format_driver->GetMetadataItem(GDAL_DCAP_CREATE) != nullptr &&
                                   !is_cog && !EQUAL(format, "VRT");
  if (is_vrt_in_memory(source) && dynamic_cast<VRTWarpedDataset*>(source) == nullptr &&
      (created_by_gdalwarp || cog_grid)) {
    m_gdalwarp = GdalwarpCommand::of_this_process(source, format);
  } else if (cog_grid && looks_materialised(source, m_destination)) {
    m_gdalwarp = GdalwarpCommand::of_this_process_warping_into(m_destination);
    if (m_gdalwarp) {
      key_options.gdalwarp_sources = m_gdalwarp->open_sources(source);
    }
  } else if (dynamic_cast<VRTWarpedDataset*>(source) != nullptr &&
             (is_cog || (created_by_gdalwarp && !EQUAL(format, "GTiff")))) {
    // Under the gdalwarp program, a warp that gdalwarp runs otherwise than the warped VRT says
    // runs with its options, read from its command line: into COG with COG's grid options, or
    // from GDAL 3.9 onto an explicit grid (docs/internals.md §11), instead of options found again
    // from the VRT; with -setci into a format with Create but GeoTIFF, which the VRT cannot show
    // (§9, §12).
    m_gdalwarp = GdalwarpCommand::of_this_process_warping_into(m_destination);
    const auto runs_its_own_way = [&](const GdalwarpCommand& command) {
      if (!is_cog) {
        return command.has_option("-setci");
      }
      return cog_grid || (gdalwarp_resamples_onto_cog_grid() &&
                          (command.has_option("-te") || command.has_option("-tr") ||
                           command.has_option("-ts")));
    };
    if (m_gdalwarp && !(m_gdalwarp->source_names().size() == 1 && runs_its_own_way(*m_gdalwarp))) {
      m_gdalwarp.reset();
    }
  }
  if (m_gdalwarp) {
    key_options.gdalwarp_arguments = m_gdalwarp->key_arguments();
  }
}

// The destination as the ledger names it (absolute real path), refused before any claim when it
// cannot be published atomically or written.
void IdemCreator::set_destination(const char* filename, GDALDriver* format_driver) {
  m_via_vsiidem = is_vsiidem_path(filename);
  const std::string real_path = m_via_vsiidem ? vsiidem_real_path(filename) : filename;
  if (is_vsi_path(real_path) && !is_object_store_path(real_path)) {
    throw DestinationRefused(std::string("IDEM cannot publish to ") + real_path +
                             ": only local paths and object storage (/vsis3/, "
                             "/vsigs/, /vsiaz/, ...) can be published atomically");
  }
  m_destination = absolute_path(real_path);
  m_given_name = real_path;
  check_destination_is_a_file(filename, m_destination, format_driver);
  check_object_output_is_a_file(m_destination, format_driver);
  check_destination(m_destination, destination_rules({}));
  if (!m_options.dry_run) {
    m_unwritable = check_destination_directory(m_destination);
  }
}

// Invariant I2's rules for this call: its ledger, its sources. A directory at the destination is
// allowed here only because check_destination_is_a_file() lets through none but a dataset of the
// format (a directory dataset).
DestinationRules IdemCreator::destination_rules(const std::vector<SourceFile>& source_files) const {
  DestinationRules rules;
  rules.ledger_dsn = m_options.ledger_dsn;
  for (const SourceFile& file : source_files) {
    rules.source_files.push_back(file.path);
  }
  rules.directory_dataset = true;
  return rules;
}

// What the user must know about the work described, or what refuses it, before it is claimed.
void IdemCreator::check_the_work() const {
  if (m_work.source_was_materialised && m_work.cog_grid && !m_work.runs_gdalwarp) {
    throw Error(ErrorKind::k_usage,
                "gdalwarp -of COG warps several sources straight into the grid that the COG "
                "grid options (TILING_SCHEME, TARGET_SRS) give, but GDAL warped them into a "
                "temporary file before calling IDEM, and IDEM cannot see the warp's options "
                "where it cannot read the gdalwarp program's command line (gdal.Warp). Build "
                "a VRT of the sources first (gdalbuildvrt mosaic.vrt a.tif b.tif, or "
                "gdal.BuildVRT) and warp mosaic.vrt.");
  }
  if (m_work.source_was_materialised) {
    CPLError(CE_Warning, CPLE_AppDefined,
             "IDEM: GDAL warped the several sources into a temporary file before calling IDEM, "
             "so the claim came after the work. Build a VRT of the sources first (gdalbuildvrt "
             "mosaic.vrt a.tif b.tif) and warp mosaic.vrt, so the work is claimed before it runs.");
  }
}

// The claim of the described work (its token is set per attempt).
ClaimRequest IdemCreator::claim_request() const {
  ClaimRequest request;
  request.work_key = m_work.key;
  request.namespace_name = m_options.namespace_name;
  request.layer = m_options.layer;
  request.tile = m_options.tile;  // else found from the grid (below)
  request.output_uri = m_destination;
  request.work_json = m_work.canonical_json;
  request.lease = m_options.lease;
  request.worker_host = worker_host_name();
  request.worker_pid = getpid();
  request.confirm_before_publishing = true;  // run_claimed confirms it before the commit
  // Computed before the first question, which is the claim itself even when the work turns
  // out completed: the footprint only for a ledger that stores it (a Web Mercator grid's from
  // closed formulas; others need a coordinate transformation).
  if (m_ledger->has_footprints()) {
    request.footprint_wkt = footprint_wkt(m_work.grid);
  }
  if (!request.tile) {
    request.tile = web_mercator_tile(m_work.grid);
  }
  return request;
}

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
      // Creation options that choose the output's grid (TILING_SCHEME, TARGET_SRS: COG's and
      // GPKG's) choose it, not the work's, and so does gdalwarp when it runs (GDALWarp() rounds
      // a mosaic's extent its own way); a Zarr of several bands opens as a container of arrays,
      // without bands.
      (m_work.cog_grid || cog_grid_options_in(m_options.passthrough) || m_work.runs_gdalwarp ||
       existing->GetRasterCount() == 0 ||
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
  const std::string holder_text =
      holder.worker_host + " pid " + std::to_string(holder.worker_pid) + " (attempt " +
      std::to_string(holder.attempt) + ", lease left " +
      std::to_string(static_cast<long>(holder.lease_left_seconds.value_or(0))) + " s)";
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
  double backoff = 0.05;
  while (const std::optional<LedgerRow> rival = earlier_claim_on_destination(ours)) {
    announce_busy(*rival, true, announced);
    keeper.poll();
    if (keeper.lost()) {
      throw ClaimLost(
          "the claim on this work was lost while it waited for "
          "other work on the same output; nothing was published");
    }
    const double pause =
        std::clamp(std::min(backoff, rival->lease_left_seconds.value_or(1.0)), 0.05, 1.0);
    backoff = std::min(backoff * 2, 1.0);
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int>(pause * 1000)));
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
    const GDALDatasetUniquePtr existing =
        open_quietly(m_destination, GDAL_OF_RASTER | GDAL_OF_READONLY);
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
    throw Error(ErrorKind::k_io, "the output " + m_destination + " vanished after publishing");
  }
  CPLStringList files;
  for (const std::string& file : published) {
    files.AddString(file.c_str());
  }
  fingerprint->members = output_members_json(m_destination, files.List());
  if (!fingerprint->members) {
    throw Error(ErrorKind::k_io,
                "a file of the output " + m_destination + " vanished right after publishing");
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
                                    : report.ran_vrt_operation ? "VRT_OPERATION"
                                                               : "OWN_OPERATION");
    debug_report_set("WARP_SOURCE", report.kept_source ? "KEPT" : "OPENED");
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
  name_output_in_header(what.format_driver, output.temp_path(), m_given_name);
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
      VSIStatBufL info;
      if (VSIStatL(output.temp_dir().c_str(), &info) != 0) {
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
    // The directory carries the work's mark: a later worker that takes this work over removes
    // it, as this one removes those of the attempts it replaced.
    const std::string owner = m_work.key.substr(0, 16);
    AtomicOutput output(m_destination, temp_token(token, owner));
    if (claim.attempt > 1) {
      const int removed =
          remove_abandoned_temp_dirs(m_destination, owner, output.temp_dir(),
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

GDALDataset* idem_create_copy(const char* filename, GDALDataset* source, int /*strict*/,
                              compat::CreateCopyOptions options, GDALProgressFunc progress,
                              void* progress_data) {
  call_reports_reset();
  const auto started = std::chrono::steady_clock::now();
  const auto report_elapsed = [&] {
    result_report_set("ELAPSED_MS",
                      milliseconds_text(std::chrono::duration<double, std::milli>(
                                            std::chrono::steady_clock::now() - started)
                                            .count()));
  };
  const auto failed = [&](const char* kind, const std::string& message) {
    debug_report_set("OUTCOME", "FAILED");
    result_report_set("OUTCOME", "FAILED");
    result_report_set("ERROR_KIND", kind);
    result_report_set("ERROR", message);
    report_elapsed();
  };
  try {
    GDALDataset* output = nullptr;
    {
      PreDelete pre_delete(filename);  // first: whatever fails below leaves the files as they were
      IdemCreator creator(pre_delete);
      output = creator.create(filename, source, options, progress, progress_data);
    }
    report_elapsed();
    return output;
  } catch (const Error& error) {
    CPLError(CE_Failure, error.kind() == ErrorKind::k_usage ? CPLE_IllegalArg : CPLE_AppDefined,
             "IDEM: %s", error.what());
    failed(error_kind_name(error), error.what());
  } catch (const std::exception& error) {
    CPLError(CE_Failure, CPLE_AppDefined, "IDEM: unexpected error: %s", error.what());
    failed("INTERNAL", error.what());
  }
  return nullptr;
}

// The IDEM driver: GDAL's, with the calling thread's reports of its last call in the RESULT and
// _DEBUG_ domains (debug_report.hpp).
class IdemDriver final : public GDALDriver {
 public:
  compat::MetadataList GetMetadata(const char* domain) override {
    return is_call_report_domain(domain) ? call_report(domain) : GDALDriver::GetMetadata(domain);
  }
  const char* GetMetadataItem(const char* name, const char* domain) override {
    return is_call_report_domain(domain) ? CSLFetchNameValue(call_report(domain), name)
                                         : GDALDriver::GetMetadataItem(name, domain);
  }
  // Setting either report to nothing empties this thread's reports, so that a program can tell
  // a call GDAL failed before calling the driver from the last call's report; they take no
  // items.
  CPLErr SetMetadata(compat::MetadataList metadata, const char* domain) override {
    if (!is_call_report_domain(domain)) {
      return GDALDriver::SetMetadata(metadata, domain);
    }
    if (CSLCount(metadata) > 0) {
      CPLError(CE_Failure, CPLE_NotSupported,
               "IDEM: the %s metadata says what the driver did; it can only be emptied", domain);
      return CE_Failure;
    }
    call_reports_reset();
    return CE_None;
  }
};

}  // namespace

void register_idem_driver() {
  declare_config_options();
  install_vsiidem_handler();
  vsiidem_set_unlink_hook(forget_before_unlink);
  vsiidem_set_use_hook(note_vsiidem_use);
  if (GDALGetDriverByName(k_driver_name) != nullptr) {
    return;
  }
  auto* driver = new IdemDriver();
  driver->SetDescription(k_driver_name);
  driver->SetMetadataItem(GDAL_DCAP_RASTER, "YES");
  driver->SetMetadataItem(GDAL_DCAP_CREATECOPY, "YES");
  driver->SetMetadataItem(GDAL_DMD_LONGNAME, "Idempotent output (gdal-idem)");
  // Relative to gdal-idem's documentation (installed in /usr/share/doc/gdal-idem), as GDAL's own
  // topics are relative to GDAL's.
  driver->SetMetadataItem(GDAL_DMD_HELPTOPIC, "docs/driver.rst");
  // Outputs may be on any GDAL virtual file system (/vsis3/, /vsimem/...), behind /vsiidem/.
  driver->SetMetadataItem(GDAL_DCAP_VIRTUALIO, "YES");
  driver->SetMetadataItem(GDAL_DMD_CREATIONOPTIONLIST, creation_option_list());
  driver->SetMetadataItem(GDAL_DMD_CREATIONDATATYPES,
                          "Byte Int8 UInt16 Int16 UInt32 Int32 UInt64 Int64 Float32 Float64 "
                          "CInt16 CInt32 CFloat32 CFloat64");
  driver->pfnCreateCopy = idem_create_copy;
  // GDALDestroyDriverManager() unloads drivers while config options (IDEM_LEDGER given with
  // --config) and the file manager are still alive: carry out deferred unlinks there.
  driver->pfnUnloadDriver = [](GDALDriver*) { vsiidem_flush_unlinks(); };
  GetGDALDriverManager()->RegisterDriver(driver);
}

}  // namespace idem
