// SPDX-License-Identifier: MIT
// One CreateCopy through the IDEM driver (idem_driver.cpp): IdemCreator, whose members live in
// three files along the call's three stages:
// - idem_creator.cpp: describing the work (destination, key, claim request) and the loop that
//   claims it, skips it or waits for it;
// - idem_skip.cpp: waiting for another worker, and skipping completed work (or a dry run);
// - idem_attempt.cpp: the claimed attempt: write, publish under the claim, record the
//   completion.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/directory_handle.hpp"
#include "base/safe_delete.hpp"
#include "cog_warp.hpp"
#include "creation_options.hpp"
#include "gdal_priv.h"
#include "gdalwarp_rules.hpp"
#include "key/source_identity.hpp"
#include "key/work_key.hpp"
#include "ledger/ledger.hpp"
#include "output_datasets.hpp"
#include "warp_engine.hpp"
#include "work/destination_guard.hpp"
#include "work/lease.hpp"
#include "work/source_watch.hpp"

namespace idem {

class AtomicOutput;

// Lap timer for the "timing:" debug lines (--debug on; bench/ reads them): ms since the last lap.
double lap_ms(std::chrono::steady_clock::time_point& lap);

// A duration in the RESULT domain: milliseconds, two decimals.
std::string milliseconds_text(double ms);

// The FILES item of the RESULT domain: a JSON array of the output's files, the primary first.
std::string files_json(const std::vector<std::string>& files);

// What a call did, on stderr as "IDEM: <message>" when the user asks (IDEM_VERBOSE=YES), else
// as a debug message (CPL_DEBUG=IDEM), which reads the same: success is not a warning.
void say_when_verbose(const std::string& message);

// One CreateCopy call through the driver.
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
  void describe_and_key(GDALDataset* source, GDALDriver* format_driver, KeyOptions& key_options);
  std::vector<SourceFile> key_the_work(GDALDataset* source, KeyOptions& key_options);
  void plan_cog(GDALDataset* source, GDALDriver* format_driver, KeyOptions& key_options);
  GDALDataset* claim_skip_or_wait(GDALDataset* source, GDALDriver* format_driver,
                                  GDALProgressFunc progress, void* progress_data);
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
  std::optional<std::string> directory_at_destination() const;

  PreDelete& m_pre_delete;
  IdemOptions m_options;
  std::string m_destination;                // absolute real path
  std::string m_given_name;                 // the output as the caller named it, without /vsiidem/
  std::optional<std::string> m_unwritable;  // why the destination's directory takes no file
  // The handle of a local destination's directory, opened once and checked before any claim:
  // every act of the attempt is relative to it (docs/concepts.md, "handles, not names").
  std::optional<DirectoryHandle> m_output_dir;
  // The tree a completion recorded for the directory dataset at the destination, which the
  // publish may then replace (nullopt: no directory there).
  std::optional<std::string> m_recorded_tree;
  bool m_via_vsiidem = false;
  std::shared_ptr<WorkerLedger> m_ledger;  // shared_ledger(), held for this call
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

}  // namespace idem
