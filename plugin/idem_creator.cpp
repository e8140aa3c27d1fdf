// SPDX-License-Identifier: MIT
// IdemCreator: describing the work and the loop that claims, skips or waits for it
// (idem_creator.hpp).
#include "idem_creator.hpp"

#include <unistd.h>

#include <cerrno>
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
#include "cog_warp.hpp"
#include "cpl_conv.h"
#include "cpl_string.h"
#include "creation_options.hpp"
#include "debug_report.hpp"
#include "driver_ledgers.hpp"
#include "gdal_priv.h"
#include "gdalwarp_rules.hpp"
#include "key/source_digest.hpp"
#include "key/tile_grid.hpp"
#include "key/work_key.hpp"
#include "ledger/ledger.hpp"
#include "output_datasets.hpp"
#include "store/object_store.hpp"
#include "vrtdataset.h"
#include "vsiidem.hpp"
#include "warp_engine.hpp"
#include "work/atomic_output.hpp"
#include "work/claim_loop.hpp"
#include "work/destination_guard.hpp"
#include "work/lease.hpp"
#include "work/output_check.hpp"
#include "work/source_watch.hpp"

namespace idem {

namespace {

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

}  // namespace

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
  describe_and_key(source, format_driver, key_options);
  return claim_skip_or_wait(source, format_driver, progress, progress_data);
}

// The work described and keyed (with the ledger's digest cache), its destination checked
// against its sources, a warp into COG planned, its sources watched from here on.
void IdemCreator::describe_and_key(GDALDataset* source, GDALDriver* format_driver,
                                   KeyOptions& key_options) {
  CPLDebug("IDEM", "timing: options %.2f ms", lap_ms(m_lap));
  const std::vector<SourceFile> source_files = key_the_work(source, key_options);
  check_destination(m_destination, destination_rules(source_files),
                    m_output_dir ? &*m_output_dir : nullptr);
  m_recorded_tree = directory_at_destination();
  plan_cog(source, format_driver, key_options);
  const double key_ms = lap_ms(m_lap);
  CPLDebug("IDEM", "timing: describe+digest+key %.2f ms", key_ms);
  result_report_set("KEY_MS", milliseconds_text(key_ms));
  result_report_set("KEY", m_work.key);
  m_source_watch = SourceWatch(source_files);
  check_the_work();
}

// The ledger opened, the work described and keyed with its digest cache: the files it reads.
std::vector<SourceFile> IdemCreator::key_the_work(GDALDataset* source, KeyOptions& key_options) {
  m_ledger = shared_ledger(m_options.ledger_dsn);
  CPLDebug("IDEM", "timing: ledger open %.2f ms", lap_ms(m_lap));
  CountingDigestCache digest_cache(m_ledger->digest_cache());
  key_options.digest_cache = &digest_cache;
  key_options.kept_sources = &m_kept_sources;
  std::vector<SourceFile> source_files;
  key_options.source_files = &source_files;
  m_work = describe_work(source, key_options);
  key_options.digest_cache = nullptr;  // the counting cache ends here
  digest_cache.report();
  return source_files;
}

// A warp into COG run as gdalwarp -of COG runs it (cog_warp.hpp), keyed again when it runs
// otherwise than the description said.
void IdemCreator::plan_cog(GDALDataset* source, GDALDriver* format_driver,
                           KeyOptions& key_options) {
  if (!m_work.is_warp || !EQUAL(format_driver->GetDescription(), "COG") || m_work.runs_gdalwarp) {
    return;
  }
  m_cog = plan_cog_warp(source, m_work, m_kept_sources, [&](const std::string& xml) {
    return canonical_vrt_text(xml, key_options);
  });
  if (m_cog.arguments && !m_work.cog_warp) {
    key_options.warp_as_gdalwarp_cog = true;
    key_options.digest_cache = &m_ledger->digest_cache();  // the sources just hashed
    m_work = describe_work(source, key_options);
  }
}

// Claims the described work and runs the attempt; or skips it, completed; or waits for the
// worker that holds it (IDEM_ON_BUSY=WAIT), backing off.
GDALDataset* IdemCreator::claim_skip_or_wait(GDALDataset* source, GDALDriver* format_driver,
                                             GDALProgressFunc progress, void* progress_data) {
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
  test_pause("before_claim");  // the destination checked (its directory held), nothing claimed
  auto claim_sent = LeaseKeeper::Clock::now();
  return run_claim_loop(
      [&] {
        request.claim_token = new_claim_token();
        claim_sent = LeaseKeeper::Clock::now();
        ClaimResult claim = read_warp_ahead ? m_ledger->claim_unless_completed(request, read_warp)
                                            : m_ledger->claim_unless_completed(request);
        if (m_work.is_warp) {
          debug_report_set("WARP_OPTIONS_READ_AHEAD", prepared_warp ? "YES" : "NO");
        }
        read_warp_ahead = false;
        CPLDebug("IDEM", "timing: claim %.2f ms", lap_ms(m_lap));
        return claim;
      },
      [&](const ClaimResult& claim) {
        return run_claimed(
            claim, claim_sent,
            WriteRequest{source, format_driver, prepared_warp.get(), progress, progress_data});
      },
      [&](const ClaimResult& claim) -> std::optional<GDALDataset*> {
        GDALDataset* output = skip_if_current(claim.row, announced_wait);
        return output != nullptr ? std::optional<GDALDataset*>(output) : std::nullopt;
      },
      [&](const LedgerRow& holder) { announce_busy(holder, false, announced_wait); });
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
  if (!is_object_store_path(m_destination)) {
    m_output_dir = open_destination_directory(m_destination);
  }
  check_destination(m_destination, destination_rules({}), m_output_dir ? &*m_output_dir : nullptr);
  if (!m_options.dry_run) {
    m_unwritable = check_destination_directory(m_destination, m_output_dir);
  }
}

// A directory at the destination (a directory dataset, Zarr) is replaced only when a completion
// recorded it there and its tree is still the one recorded; its tree then, or nullopt when no
// directory is there. Anything else is refused before any claim (as plain GDAL refuses to write
// over an existing dataset).
std::optional<std::string> IdemCreator::directory_at_destination() const {
  if (!m_output_dir) {
    return std::nullopt;
  }
  const std::string name = basename_of(m_destination);
  const std::optional<struct stat> there = m_output_dir->look(name);
  if (!there || !S_ISDIR(there->st_mode)) {
    return std::nullopt;
  }
  const std::optional<TreeSummary> now = tree_summary_at(*m_output_dir, name);
  if (now) {
    for (const LedgerRow& row : m_ledger->rows_on_output(m_destination, RowState::k_completed)) {
      if (recorded_tree_of(row, m_destination) == now->sha256) {
        return now->sha256;
      }
    }
  }
  throw DestinationRefused(describe_foreign_directory(m_destination));
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

}  // namespace idem
