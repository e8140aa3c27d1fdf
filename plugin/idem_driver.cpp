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
#include "cpl_conv.h"
#include "cpl_string.h"
#include "gdal_priv.h"
#include "gdal_proxy.h"
#include "key/source_digest.hpp"
#include "key/tile_grid.hpp"
#include "key/work_key.hpp"
#include "ledger/ledger.hpp"
#include "ogr_spatialref.h"
#include "vrtdataset.h"
#include "vsiidem.hpp"
#include "warp_engine.hpp"
#include "work/atomic_output.hpp"
#include "work/lease.hpp"
#include "work/output_check.hpp"

namespace idem {

namespace {

constexpr const char* k_driver_name = "IDEM";
// The metadata domain of a dry run's dataset: KEY, WORK (canonical JSON), DESTINATION.
constexpr const char* k_metadata_domain = "IDEM";
constexpr int k_default_stale_seconds = 300;
// How many times an object output is looked at again and uploaded when the store refuses its
// conditional upload while this attempt still holds its claim (see IdemCreator::create).
constexpr int k_upload_rounds = 3;

// ---------------------------------------------------------------------------------------------
// Options

struct IdemOptions {
  std::string format = "GTiff";
  std::string namespace_name = "default";
  std::optional<std::string> layer;
  std::optional<TileIndex> tile;
  std::vector<std::pair<std::string, std::string>> passthrough;  // as given
  std::string ledger_dsn;
  std::chrono::seconds lease{k_default_stale_seconds};
  bool fail_when_busy = false;
  bool durable = true;
  bool dry_run = false;
  SourceDigestPolicy digest_policy = SourceDigestPolicy::k_auto;
  bool include_gdal_version = false;
};

std::string upper(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return text;
}

std::chrono::seconds parse_stale_seconds(const char* value) {
  char* end = nullptr;
  const long seconds = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || seconds < 2) {
    throw Error(ErrorKind::k_usage, std::string("IDEM_STALE_SECONDS=") + value +
                                        " is not a lease length: give whole seconds, at least 2 "
                                        "(e.g. the orchestrator's task timeout plus a margin)");
  }
  return std::chrono::seconds(seconds);
}

// A creation option of the FORMAT driver written DRIVER.OPTION=VALUE.
struct QualifiedOption {
  std::string driver;
  std::string name;
  std::string value;
};

IdemOptions parse_options(CSLConstList creation_options) {
  IdemOptions options;
  std::vector<QualifiedOption> qualified;
  std::set<std::string> own_given;  // IDEM's own options seen (FORMAT, NAMESPACE...)
  if (const char* ns = CPLGetConfigOption("IDEM_NAMESPACE", nullptr)) {
    options.namespace_name = ns;
  }
  for (CSLConstList item = creation_options; item != nullptr && *item != nullptr; ++item) {
    char* raw_key = nullptr;
    const char* value = CPLParseNameValue(*item, &raw_key);
    if (raw_key == nullptr || value == nullptr) {
      CPLFree(raw_key);
      throw Error(ErrorKind::k_usage,
                  std::string("creation option '") + *item + "' is not NAME=VALUE");
    }
    const std::string key = raw_key;
    CPLFree(raw_key);
    const std::string name = upper(key);
    // DRIVER.OPTION=VALUE: a creation option of the FORMAT driver, named unambiguously (its
    // name may be one of IDEM's own: netCDF's and Zarr's FORMAT). Checked against FORMAT below.
    const size_t dot = key.find('.');
    if (dot != std::string::npos && dot > 0 && dot + 1 < key.size() &&
        GetGDALDriverManager()->GetDriverByName(key.substr(0, dot).c_str()) != nullptr) {
      qualified.push_back({key.substr(0, dot), key.substr(dot + 1), value});
      continue;
    }
    if (name == "FORMAT" || name == "NAMESPACE" || name == "LAYER" || name == "TILE") {
      if (!own_given.insert(name).second) {
        throw Error(ErrorKind::k_usage,
                    name + " is given twice: IDEM's " + name +
                        " takes one value. A creation option of the FORMAT driver with the "
                        "same name is written with the driver's name in front, e.g. -co "
                        "FORMAT=netCDF -co netCDF." +
                        name + "=...");
      }
    }
    if (name == "FORMAT") {
      options.format = value;
    } else if (name == "NAMESPACE") {
      options.namespace_name = value;
    } else if (name == "LAYER") {
      options.layer = std::string(value);
    } else if (name == "TILE") {
      options.tile = parse_tile_index(value);
    } else {
      options.passthrough.emplace_back(key, value);
    }
  }
  for (const QualifiedOption& option : qualified) {
    if (!EQUAL(option.driver.c_str(), options.format.c_str())) {
      throw Error(ErrorKind::k_usage,
                  option.driver + "." + option.name + " is a creation option of the " +
                      option.driver + " driver, but the output driver is FORMAT=" + options.format +
                      ": name the options of FORMAT's driver");
    }
    options.passthrough.emplace_back(option.name, option.value);
  }
  // One value per option of the FORMAT driver: a second, different one would be dropped.
  std::map<std::string, std::string> seen;
  for (const auto& [key, value] : options.passthrough) {
    const auto [at, inserted] = seen.emplace(upper(key), value);
    if (!inserted && at->second != value) {
      throw Error(ErrorKind::k_usage, "the creation option " + key + " is given twice (" +
                                          at->second + " and " + value + "): give it once");
    }
  }
  if (options.namespace_name.empty()) {
    throw Error(ErrorKind::k_usage, "the namespace is empty: set NAMESPACE or IDEM_NAMESPACE");
  }
  options.ledger_dsn = CPLGetConfigOption("IDEM_LEDGER", "");
  if (const char* stale = CPLGetConfigOption("IDEM_STALE_SECONDS", nullptr)) {
    options.lease = parse_stale_seconds(stale);
  }
  const std::string on_busy = upper(CPLGetConfigOption("IDEM_ON_BUSY", "WAIT"));
  if (on_busy != "WAIT" && on_busy != "FAIL") {
    throw Error(ErrorKind::k_usage,
                "IDEM_ON_BUSY=" + on_busy + " is not valid: use WAIT (the default) or FAIL");
  }
  options.fail_when_busy = on_busy == "FAIL";
  options.durable = CPLTestBool(CPLGetConfigOption("IDEM_FSYNC", "YES"));
  conditional_writes_enabled();  // a bad IDEM_CONDITIONAL_WRITE is refused before any work
  options.dry_run = CPLTestBool(CPLGetConfigOption("IDEM_DRY_RUN", "NO"));
  options.digest_policy =
      parse_source_digest_policy(CPLGetConfigOption("IDEM_SOURCE_DIGEST", "AUTO"));
  options.include_gdal_version = CPLTestBool(CPLGetConfigOption("IDEM_KEY_GDAL_VERSION", "NO"));
  return options;
}

GDALDriver* find_format_driver(const std::string& format) {
  if (upper(format) == k_driver_name) {
    throw Error(ErrorKind::k_usage,
                "FORMAT=IDEM would wrap IDEM in itself: name the real output "
                "driver, e.g. FORMAT=GTiff or FORMAT=COG");
  }
  auto* driver = GetGDALDriverManager()->GetDriverByName(format.c_str());
  if (driver == nullptr || driver->GetMetadataItem(GDAL_DCAP_RASTER) == nullptr) {
    throw Error(ErrorKind::k_usage,
                "FORMAT=" + format +
                    " is not a GDAL raster driver here; `gdalinfo --formats` lists them (e.g. "
                    "GTiff, COG, PNG). IDEM's FORMAT names the output driver: a FORMAT option "
                    "of that driver is written with its name in front (-co FORMAT=netCDF -co "
                    "netCDF.FORMAT=NC4)");
  }
  if (EQUAL(driver->GetDescription(), "MEM")) {
    throw Error(ErrorKind::k_usage,
                "FORMAT=MEM writes no file, and IDEM publishes and records "
                "files: name a driver that writes one (GTiff, COG, PNG...)");
  }
  if (driver->GetMetadataItem(GDAL_DCAP_CREATE) == nullptr &&
      driver->GetMetadataItem(GDAL_DCAP_CREATECOPY) == nullptr) {
    throw Error(ErrorKind::k_usage, "FORMAT=" + format + " cannot write files (read-only driver)");
  }
  return driver;
}

// ---------------------------------------------------------------------------------------------
// One ledger connection per DSN per process: opening (and checking the schema) on every
// CreateCopy would dominate the cost of a skip. Ledger instances serialise their own calls.
// After a fork the parent's connections are abandoned, never closed: closing a PostgreSQL
// connection from the child would end the parent's session.

struct SharedLedgers {
  std::mutex mutex;
  std::map<std::string, Ledger*>* ledgers = new std::map<std::string, Ledger*>();
  pid_t owner = getpid();
};

SharedLedgers& shared_ledgers() {
  static auto* instance = new SharedLedgers();  // leaked: ledgers live for the process
  return *instance;
}

Ledger& shared_ledger(const std::string& dsn) {
  SharedLedgers& shared = shared_ledgers();
  std::lock_guard<std::mutex> lock(shared.mutex);
  if (shared.owner != getpid()) {
    shared.ledgers = new std::map<std::string, Ledger*>();  // the parent's are left alone
    shared.owner = getpid();
  }
  auto found = shared.ledgers->find(dsn);
  if (found == shared.ledgers->end()) {
    found = shared.ledgers->emplace(dsn, Ledger::open(dsn).release()).first;
  }
  return *found->second;
}

// The first use of /vsiidem/ in a process comes before a write through it (gdalwarp looks at its
// output before it opens the sources and works out the grid): a PostgreSQL ledger named by
// IDEM_LEDGER starts connecting then, and each later use moves the connection on, so that the
// driver finds it made (Ledger::preopen). IDEM_LEDGER_PREOPEN=NO turns this off.
void start_opening_ledger_ahead() {
  const char* dsn = CPLGetConfigOption("IDEM_LEDGER", nullptr);
  if (dsn == nullptr || dsn[0] == '\0' ||
      !CPLTestBool(CPLGetConfigOption("IDEM_LEDGER_PREOPEN", "YES")) ||
      CPLTestBool(CPLGetConfigOption("IDEM_DRY_RUN", "NO"))) {
    return;  // a dry run touches no ledger
  }
  {
    SharedLedgers& shared = shared_ledgers();
    std::lock_guard<std::mutex> lock(shared.mutex);
    if (shared.owner == getpid() && shared.ledgers->count(dsn) != 0) {
      return;  // open already
    }
  }
  try {
    Ledger::preopen(dsn);
  } catch (const std::exception& error) {
    CPLDebug("IDEM", "could not start opening the ledger ahead: %s", error.what());
  }
}

void note_vsiidem_use() {
  // The process (pid) in which the first use began, and in which it has ended: another thread's
  // use waits for it, so that its own write finds the connection started.
  static std::atomic<pid_t> began{0};
  static std::atomic<pid_t> ended{0};
  const pid_t pid = getpid();
  if (ended.load() != pid) {
    pid_t before = began.load();
    if (before != pid && began.compare_exchange_strong(before, pid)) {
      try {
        start_opening_ledger_ahead();
      } catch (...) {
        // Never leave the other threads waiting: without it the driver connects itself.
      }
      ended = pid;
      return;
    }
    while (ended.load() != pid) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  Ledger::advance_preopened();
}

// ---------------------------------------------------------------------------------------------
// Outputs on disk

// Refuse before claiming when the output cannot be written, so no claim is left behind.
void check_destination_directory(const std::string& destination) {
  if (is_object_store_path(destination)) {
    return;  // no directories: an unwritable bucket fails the upload, which releases the claim
  }
  const std::string directory = dirname_of(destination);
  struct stat info;
  if (stat(directory.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    throw Error(ErrorKind::k_usage, "the destination directory " + directory +
                                        " does not exist; create it first (mkdir -p)");
  }
  if (access(directory.c_str(), W_OK) != 0) {
    throw Error(ErrorKind::k_usage, "the destination directory " + directory +
                                        " is not writable (" + std::strerror(errno) +
                                        "); fix its permissions or write elsewhere");
  }
}

// An output path that names a directory ("/vsiidem/" alone, "out/") is refused before any claim.
void check_destination_is_a_file(const char* filename, const std::string& destination) {
  const std::string given = filename;
  VSIStatBufL info;
  const bool is_directory = given.empty() || given.back() == '/' || destination == "/" ||
                            (!is_object_store_path(destination) &&
                             VSIStatL(destination.c_str(), &info) == 0 && VSI_ISDIR(info.st_mode));
  if (is_directory) {
    throw Error(ErrorKind::k_usage, "the output '" + given + "' names a directory (" + destination +
                                        "), not a file: give the output file's name, e.g. "
                                        "/vsiidem/tiles/out.tif");
  }
}

// An output written over one of its own sources would replace its input, and every rerun would
// work on its own output: refused before any claim, comparing real paths and device + inode.
void check_destination_is_not_a_source(const std::string& destination,
                                       const std::vector<std::string>& source_files) {
  struct stat output {};
  const bool local = !is_vsi_path(destination);
  const bool output_exists = local && ::stat(destination.c_str(), &output) == 0;
  char* resolved = local ? ::realpath(destination.c_str(), nullptr) : nullptr;
  const std::string real_destination = resolved != nullptr ? resolved : destination;
  std::free(resolved);
  for (const std::string& file : source_files) {
    struct stat input {};
    bool same = absolute_path(file) == destination || file == real_destination;
    if (!same && output_exists && !is_vsi_path(file) && ::stat(file.c_str(), &input) == 0) {
      same = input.st_dev == output.st_dev && input.st_ino == output.st_ino;
    }
    if (same) {
      throw Error(ErrorKind::k_usage, "the output " + destination + " is one of the sources (" +
                                          file +
                                          "): the work would replace its own input; "
                                          "write the output to another path");
    }
  }
}

// The datasets the CreateCopy source reads its pixels through, as the caller holds them: the
// source itself (unless it is a VRT made in memory), a warped VRT's source, and the sources of a
// VRT made in memory (gdal_translate's, gdal.Translate's, gdal.BuildVRT('', ...)), through any
// depth of VRTs made in memory.
void add_read_through(GDALDataset* dataset, std::vector<GDALDataset*>& held, int depth) {
  if (dataset == nullptr) {
    return;
  }
  if (depth > 32) {
    throw Error(ErrorKind::k_source, "VRTs made in memory nested too deeply");
  }
  std::vector<GDALDataset*> found;
  if (GDALDataset* warped_from = warped_vrt_source(dataset)) {
    found.push_back(warped_from);
  }
  if (is_vrt_in_memory(dataset) && dynamic_cast<VRTWarpedDataset*>(dataset) == nullptr) {
    for (int i = 1; i <= dataset->GetRasterCount(); ++i) {
      auto* band = dynamic_cast<VRTSourcedRasterBand*>(dataset->GetRasterBand(i));
      if (band == nullptr) {
        continue;
      }
      for (VRTSource* vrt_source : compat::vrt_band_sources(band)) {
        if (!vrt_source->IsSimpleSource()) {
          continue;
        }
        auto* simple = static_cast<VRTSimpleSource*>(vrt_source);
        GDALRasterBand* from = simple->GetRasterBand();
        if (from != nullptr && from->GetDataset() != nullptr) {
          found.push_back(from->GetDataset());
        }
      }
    }
  }
  for (GDALDataset* next : found) {
    if (std::find(held.begin(), held.end(), next) != held.end()) {
      continue;
    }
    held.push_back(next);
    if (is_vrt_in_memory(next)) {
      add_read_through(next, held, depth + 1);
    }
  }
}

std::vector<GDALDataset*> datasets_read_through(GDALDataset* source) {
  std::vector<GDALDataset*> held;
  if (source == nullptr) {
    return held;
  }
  if (!is_vrt_in_memory(source)) {
    held.push_back(source);
  }
  add_read_through(source, held, 0);
  return held;
}

// One open for update may hold changes not yet written to its files (pixels in GDAL's block
// cache, a georeferencing set but not saved): they are written now, so that the key, which
// identifies the files' bytes, and the warp, which reads the files, see what GDAL would read
// through the handle (docs/keys.md, "Sources open for update"). A VRT made in memory has no file
// to write (gdalwarp's is open for update on GDAL 3.10), so it is not among them.
void write_pending_changes_of_sources(const std::vector<GDALDataset*>& read_through) {
  std::set<GDALDataset*> written;
  for (GDALDataset* dataset : read_through) {
    if (dataset != nullptr && dataset->GetAccess() == GA_Update && written.insert(dataset).second) {
      CPLDebug("IDEM", "writing the pending changes of %s, open for update, before keying it",
               dataset->GetDescription());
      dataset->FlushCache(false);
    }
  }
}

// A source without files (a MEM dataset), or a VRT made in memory (gdal.BuildVRT('', ...)), that
// the CreateCopy source reads from cannot be opened again by the name it is recorded under
// (often ""): the key and the warp take the caller's handle under that name instead (docs/keys.md,
// "Sources in memory"). Two such sources under one name cannot be told apart by it: refused.
void keep_sources_without_files(GDALDataset* source, const std::vector<GDALDataset*>& read_through,
                                KeptSources& kept) {
  for (GDALDataset* dataset : read_through) {
    if (dataset == source) {
      continue;  // handed over itself: its identity is taken from the handle directly
    }
    const std::string name = dataset->GetDescription();
    if (!held_not_reopened(dataset)) {
      continue;  // opened again by its name, as its files are now
    }
    if (GDALDataset* already = kept.find(name)) {
      if (already != dataset) {
        throw Error(ErrorKind::k_usage,
                    "two sources held in memory are both named '" + name +
                        "', so they cannot be told apart: give each its own name (a MEM "
                        "dataset: Create('name', ...); a VRT: build it as /vsimem/name.vrt)");
      }
      continue;
    }
    dataset->Reference();
    kept.keep(name, dataset);
  }
}

// GDAL's pre-delete recorded every file of the dataset (sidecars too): keep them all.
void keep_dataset_files(GDALDataset* dataset) {
  char** files = dataset->GetFileList();
  for (char** file = files; file != nullptr && *file != nullptr; ++file) {
    vsiidem_cancel_unlink(*file);
  }
  CSLDestroy(files);
}

// GDAL's pre-delete of this call's destination, deferred by /vsiidem/ and resolved by this call
// (vsiidem.hpp): a skip, a failure or a dry run leaves every file as it was; a publish removes
// the files of the replaced output that the new one does not have, before the completion.
class PreDelete {
 public:
  explicit PreDelete(const char* filename)
      : m_adoption(filename != nullptr && is_vsiidem_path(filename)
                       ? vsiidem_adopt_pre_delete(vsiidem_absolute_path(filename))
                       : 0) {}
  ~PreDelete() {
    if (!m_resolved) {
      vsiidem_resolve_pre_delete(m_adoption, false);
    }
  }
  PreDelete(const PreDelete&) = delete;
  PreDelete& operator=(const PreDelete&) = delete;

  // After the new output's `files` are in place.
  void published(const std::vector<std::string>& files) {
    m_resolved = true;
    const std::vector<std::string> failed = vsiidem_resolve_pre_delete(m_adoption, true, files);
    if (!failed.empty()) {
      throw Error(ErrorKind::k_io,
                  "the new output was published, but " + failed.front() +
                      ", a file of the output it replaced, could not be removed, so the work is "
                      "not recorded as completed; remove that file and run again");
    }
  }

 private:
  uint64_t m_adoption;
  bool m_resolved = false;
};

// After a refused completion on object storage (no conditional write is used yet, see
// docs/object-storage.md): the object this attempt uploaded is deleted if the store still has it
// and no completed row records those bytes (a successor on the same work may have uploaded the
// very same bytes), so its pixels do not stay where another worker's completion is recorded.
void remove_own_object(Ledger& ledger, const std::string& path, const OutputFingerprint& ours) {
  const auto headers = object_headers(path, true);
  if (!headers || !headers_match(path, *headers, ours)) {
    return;  // not ours any more
  }
  Ledger::RowFilter filter;
  filter.output_uri = path;
  filter.state = RowState::k_completed;
  for (const LedgerRow& row : ledger.rows(filter)) {
    if (row.fingerprint && headers_match(path, *headers, *row.fingerprint)) {
      return;  // recorded by a completion: those bytes stay
    }
  }
  if (VSIUnlink(path.c_str()) == 0) {
    CPLDebug("IDEM", "removed %s, uploaded by this attempt after its claim was lost", path.c_str());
  }
}

// `published`: every file this attempt published. GDAL then takes the output's sidecars from that
// list instead of listing the directory (on object storage a LIST request per tile), and never
// attaches a stale sidecar that the end of the process deletes.
GDALDataset* open_output(const std::string& path,
                         const std::vector<std::string>* published = nullptr) {
  CPLStringList siblings;
  if (published != nullptr) {
    const std::string directory = CPLGetPath(path.c_str());
    for (const std::string& file : *published) {
      if (CPLGetPath(file.c_str()) == directory) {
        siblings.AddString(CPLGetFilename(file.c_str()));
      }
    }
  }
  // With a sibling list GDAL 3.6 still lists an object store "directory" while opening, unless
  // told the directory holds nothing else (the list given is then all it looks at).
  std::unique_ptr<CPLConfigOptionSetter> no_listing;
  if (published != nullptr) {
    no_listing =
        std::make_unique<CPLConfigOptionSetter>("GDAL_DISABLE_READDIR_ON_OPEN", "EMPTY_DIR", false);
  }
  auto* dataset =
      GDALDataset::Open(path.c_str(), GDAL_OF_RASTER | GDAL_OF_READONLY | GDAL_OF_VERBOSE_ERROR,
                        nullptr, nullptr, published != nullptr ? siblings.List() : nullptr);
  no_listing.reset();
  if (dataset == nullptr) {
    throw Error(ErrorKind::k_io, "the output " + path +
                                     " cannot be opened after writing it: " + CPLGetLastErrorMsg());
  }
  return dataset;
}

// What a written output looks like: enough to hand out an object output without asking the
// store (DeferredOutput).
struct OutputShape {
  struct Band {
    GDALDataType type = GDT_Unknown;
    int block_x = 0;
    int block_y = 0;
  };
  int width = 0;
  int height = 0;
  OGRSpatialReference srs;
  bool has_srs = false;
  bool has_geotransform = false;
  double geotransform[6] = {0, 1, 0, 0, 0, 1};
  std::vector<Band> bands;
};

OutputShape shape_of(GDALDataset& dataset) {
  OutputShape shape;
  shape.width = dataset.GetRasterXSize();
  shape.height = dataset.GetRasterYSize();
  if (const OGRSpatialReference* srs = dataset.GetSpatialRef()) {
    shape.srs = *srs;
    shape.has_srs = true;
  }
  shape.has_geotransform = compat::get_geotransform(&dataset, shape.geotransform) == CE_None;
  for (int i = 1; i <= dataset.GetRasterCount(); ++i) {
    GDALRasterBand* band = dataset.GetRasterBand(i);
    OutputShape::Band described;
    described.type = band->GetRasterDataType();
    band->GetBlockSize(&described.block_x, &described.block_y);
    shape.bands.push_back(described);
  }
  return shape;
}

// The object output just uploaded, as the dataset CreateCopy returns: its size, bands and
// georeferencing come from what was written, and the object itself is opened (a request to the
// store) only when something else is asked of it, with the uploaded files as its siblings.
// gdalwarp and gdal_translate close it unread, so the upload is the run's last request.
class DeferredOutput final : public GDALProxyDataset {
 public:
  DeferredOutput(const std::string& path, std::vector<std::string> published, OutputShape shape);
  ~DeferredOutput() override;
  GDALDataset* underlying() const { return RefUnderlyingDataset(); }
  bool is_open() const { return m_opened != nullptr; }

  // Read-only: nothing to write, nothing to open.
  compat::DatasetFlushResult FlushCache(bool at_closing) override {
    if (!is_open()) {
      return compat::flush_done();
    }
    return GDALProxyDataset::FlushCache(at_closing);
  }

#if IDEM_GDAL_PROXY_CLOSE_TAKES_PROGRESS
  // The proxy would open the object to close it (GDAL 3.13): closing what was never opened
  // only marks this dataset closed.
  CPLErr Close(GDALProgressFunc progress, void* progress_data) override {
    return is_open() ? GDALProxyDataset::Close(progress, progress_data)
                     : GDALDataset::Close(progress, progress_data);
  }
#endif

  CPLErr GetGeoTransform(IDEM_GEOTRANSFORM_OVERRIDE_PARAMETERS(geotransform))
      IDEM_GEOTRANSFORM_OVERRIDE_CONST override {
    if (!m_shape.has_geotransform) {
      return GDALProxyDataset::GetGeoTransform(geotransform);
    }
    std::copy(m_shape.geotransform, m_shape.geotransform + 6,
              IDEM_GEOTRANSFORM_OUT_DATA(geotransform));
    return CE_None;
  }
  const OGRSpatialReference* GetSpatialRef() const override {
    return m_shape.has_srs ? &m_shape.srs : GDALProxyDataset::GetSpatialRef();
  }

 protected:
  GDALDataset* RefUnderlyingDataset() const override;
  void UnrefUnderlyingDataset(GDALDataset* /*dataset*/) const override {}

 private:
  std::string m_path;
  std::vector<std::string> m_published;
  OutputShape m_shape;
  mutable GDALDataset* m_opened = nullptr;
  mutable bool m_open_failed = false;
};

class DeferredOutputBand final : public GDALProxyRasterBand {
 public:
  DeferredOutputBand(DeferredOutput* owner, int number, const OutputShape::Band& shape) {
    poDS = owner;
    nBand = number;
    eDataType = shape.type;
    nBlockXSize = shape.block_x;
    nBlockYSize = shape.block_y;
    nRasterXSize = owner->GetRasterXSize();
    nRasterYSize = owner->GetRasterYSize();
  }

  CPLErr FlushCache(bool at_closing) override {
    return static_cast<DeferredOutput*>(poDS)->is_open()
               ? GDALProxyRasterBand::FlushCache(at_closing)
               : CE_None;
  }

 protected:
  GDALRasterBand* RefUnderlyingRasterBand(IDEM_REF_UNDERLYING_BAND_PARAMETERS) const override {
    GDALDataset* underlying = static_cast<DeferredOutput*>(poDS)->underlying();
    return underlying != nullptr && nBand <= underlying->GetRasterCount()
               ? underlying->GetRasterBand(nBand)
               : nullptr;
  }
  void UnrefUnderlyingRasterBand(GDALRasterBand* /*band*/) const override {}
};

DeferredOutput::DeferredOutput(const std::string& path, std::vector<std::string> published,
                               OutputShape shape)
    : m_path(path), m_published(std::move(published)), m_shape(std::move(shape)) {
  SetDescription(path.c_str());
  nRasterXSize = m_shape.width;
  nRasterYSize = m_shape.height;
  eAccess = GA_ReadOnly;
  for (size_t i = 0; i < m_shape.bands.size(); ++i) {
    SetBand(static_cast<int>(i) + 1,
            new DeferredOutputBand(this, static_cast<int>(i) + 1, m_shape.bands[i]));
  }
}

DeferredOutput::~DeferredOutput() {
  if (m_opened != nullptr) {
    GDALClose(m_opened);
  }
  m_opened = nullptr;  // the bands, deleted after this, must not reach for it
  m_open_failed = true;
}

GDALDataset* DeferredOutput::RefUnderlyingDataset() const {
  if (m_opened == nullptr && !m_open_failed) {
    try {
      m_opened = open_output(m_path, &m_published);
    } catch (const Error& error) {
      m_open_failed = true;
      CPLError(CE_Failure, CPLE_OpenFailed, "IDEM: %s", error.what());
    }
  }
  return m_opened;
}

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

struct ProgressRelay {
  GDALProgressFunc user_progress;
  void* user_data;
  LeaseKeeper* keeper;
  bool paused_mid_write = false;
};

int CPL_STDCALL relay_progress(double complete, const char* message, void* data) {
  auto* relay = static_cast<ProgressRelay*>(data);
  if (complete >= 0.5 && !relay->paused_mid_write) {
    relay->paused_mid_write = true;
    test_pause("during_write");
  }
  relay->keeper->poll();
  if (relay->keeper->lost()) {
    CPLError(CE_Failure, CPLE_UserInterrupt,
             "IDEM: the claim on this work was lost (lease expired and another worker took it "
             "over); aborting without publishing");
    return FALSE;
  }
  return relay->user_progress(complete, message, relay->user_data);
}

// ---------------------------------------------------------------------------------------------
// The creator: one CreateCopy call.

class IdemCreator {
 public:
  explicit IdemCreator(PreDelete& pre_delete) : m_pre_delete(pre_delete) {}
  GDALDataset* create(const char* filename, GDALDataset* source, CSLConstList creation_options,
                      GDALProgressFunc progress, void* progress_data);

 private:
  void set_destination(const char* filename);
  void warn_about_the_work(GDALDriver* format_driver, const CPLStringList& passthrough) const;
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

  PreDelete& m_pre_delete;
  IdemOptions m_options;
  std::string m_destination;  // absolute real path
  bool m_via_vsiidem = false;
  Ledger* m_ledger = nullptr;  // shared_ledger(): lives for the process
  WorkDescription m_work;
  KeptSources m_kept_sources;  // opened for the key, reused by the warp
  std::chrono::steady_clock::time_point m_lap = std::chrono::steady_clock::now();
};

GDALDataset* IdemCreator::create(const char* filename, GDALDataset* source,
                                 CSLConstList creation_options, GDALProgressFunc progress,
                                 void* progress_data) {
  if (progress == nullptr) {
    progress = GDALDummyProgress;
  }
  m_options = parse_options(creation_options);
  GDALDriver* format_driver = find_format_driver(m_options.format);
  CPLStringList passthrough;
  for (const auto& [key, value] : m_options.passthrough) {
    passthrough.SetNameValue(key.c_str(), value.c_str());
  }
  // Unknown options for the real driver are reported the way GDAL reports them for any driver.
  GDALValidateCreationOptions(format_driver, passthrough.List());

  set_destination(filename);

  KeyOptions key_options;
  key_options.namespace_name = m_options.namespace_name;
  key_options.format = format_driver->GetDescription();
  key_options.creation_options = m_options.passthrough;
  key_options.destination = m_destination;
  key_options.digest_policy = m_options.digest_policy;
  key_options.include_gdal_version = m_options.include_gdal_version;

  const std::vector<GDALDataset*> read_through = datasets_read_through(source);
  write_pending_changes_of_sources(read_through);
  keep_sources_without_files(source, read_through, m_kept_sources);
  if (m_options.dry_run) {
    // A dry run hashes its sources into memory, unless told to use the ledger's persistent
    // digest cache (`gdal-idem pending` does: a source shared by a batch is hashed once).
    InMemoryDigestCache cache;
    key_options.digest_cache = &cache;
    if (EQUAL(CPLGetConfigOption("IDEM_DRY_RUN_DIGEST_CACHE", "MEMORY"), "LEDGER")) {
      key_options.digest_cache = &shared_ledger(m_options.ledger_dsn).digest_cache();
    }
    m_work = describe_work(source, key_options);
    return dry_run(m_work);
  }

  CPLDebug("IDEM", "timing: options %.2f ms", lap_ms(m_lap));
  m_ledger = &shared_ledger(m_options.ledger_dsn);
  CPLDebug("IDEM", "timing: ledger open %.2f ms", lap_ms(m_lap));
  key_options.digest_cache = &m_ledger->digest_cache();
  key_options.kept_sources = &m_kept_sources;
  std::vector<std::string> source_files;
  key_options.source_files = &source_files;
  m_work = describe_work(source, key_options);
  check_destination_is_not_a_source(m_destination, source_files);
  CPLDebug("IDEM", "timing: describe+digest+key %.2f ms", lap_ms(m_lap));
  warn_about_the_work(format_driver, passthrough);
  ClaimRequest request = claim_request();

  // A warp's options are read while a PostgreSQL ledger answers the first claim (cheap when they
  // come with the VRT's transformer; PROJ's work when it is rebuilt, bench/RESULTS.md), unless GDAL
  // found an output at the destination: the answer is then likely "completed", and the reading
  // would be wasted.
  PreparedWarpPtr prepared_warp;
  bool read_warp_ahead = m_work.is_warp && !EQUAL(format_driver->GetDescription(), "VRT") &&
                         !vsiidem_unlink_pending(m_destination);
  const std::function<void()> read_warp = [&] {
    prepared_warp = prepare_warp_ahead(source, &m_work.vrt_xml, &m_kept_sources);
  };

  bool announced_wait = false;
  double wait_backoff = 0.05;  // seconds
  for (;;) {
    request.claim_token = new_claim_token();
    const auto claim_sent = LeaseKeeper::Clock::now();
    const ClaimResult claim = read_warp_ahead ? m_ledger->claim_unless_completed(request, read_warp)
                                              : m_ledger->claim_unless_completed(request);
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

// The destination as the ledger names it (absolute real path), refused before any claim when it
// cannot be published atomically or written.
void IdemCreator::set_destination(const char* filename) {
  m_via_vsiidem = is_vsiidem_path(filename);
  const std::string real_path = m_via_vsiidem ? vsiidem_real_path(filename) : filename;
  if (is_vsi_path(real_path) && !is_object_store_path(real_path)) {
    throw Error(ErrorKind::k_usage, std::string("IDEM cannot publish to ") + real_path +
                                        ": only local paths and object storage (/vsis3/, "
                                        "/vsigs/, /vsiaz/, ...) can be published atomically");
  }
  m_destination = absolute_path(real_path);
  check_destination_is_a_file(filename, m_destination);
  if (!m_options.dry_run) {
    check_destination_directory(m_destination);
  }
}

// What the user would want to know about the work described before it is claimed.
void IdemCreator::warn_about_the_work(GDALDriver* format_driver,
                                      const CPLStringList& passthrough) const {
  if (m_work.is_warp && EQUAL(format_driver->GetDescription(), "COG")) {
    for (const char* name : {"TILING_SCHEME", "TARGET_SRS", "RES", "EXTENT"}) {
      if (passthrough.FetchNameValue(name) != nullptr) {
        // gdalwarp folds these into the warp only when its output format is COG itself.
        CPLError(CE_Warning, CPLE_AppDefined,
                 "IDEM: -co %s makes the COG driver warp the already warped output a second "
                 "time; set the target grid on the warp instead (-t_srs, -tr, -te, -tap)",
                 name);
      }
    }
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
      existing->GetRasterXSize() == m_work.grid.x_size &&
      existing->GetRasterYSize() == m_work.grid.y_size) {
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
    throw Error(ErrorKind::k_ledger, "work " + m_work.key.substr(0, 12) + " for " + m_destination +
                                         ": " + what + " is being done by " + holder_text +
                                         "; IDEM_ON_BUSY=FAIL");
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
      throw Error(ErrorKind::k_ledger,
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
  Ledger::RowFilter filter;
  filter.output_uri = m_destination;
  filter.state = RowState::k_in_flight;
  const auto before = [&](const LedgerRow& row) {
    const double theirs = row.claimed_at.value_or(0);
    const double mine = ours.claimed_at.value_or(0);
    return theirs < mine || (theirs == mine && row.work_key < m_work.key);
  };
  for (LedgerRow& row : m_ledger->rows(filter)) {
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
    CPLPushErrorHandler(CPLQuietErrorHandler);
    GDALDatasetUniquePtr existing(
        GDALDataset::Open(m_destination.c_str(), GDAL_OF_RASTER | GDAL_OF_READONLY));
    CPLPopErrorHandler();
    CPLErrorReset();
    if (existing) {
      keep_dataset_files(existing.get());
    }
  }
  CPLError(CE_Warning, CPLE_AppDefined, "IDEM dry run: key=%s destination=%s", work.key.c_str(),
           m_destination.c_str());
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
  CPLDebug("IDEM", "timing: skip (open output) %.2f ms", lap_ms(m_lap));
  // A warning, through the caller's error handler: it may silence it (gdal.quiet_errors(),
  // CPLQuietErrorHandler) or capture it (Python logging, rasterio).
  CPLError(CE_Warning, CPLE_AppDefined, "IDEM: skipped %s: %s (key %s, attempt %lld)",
           m_destination.c_str(), why, row.work_key.substr(0, 12).c_str(),
           static_cast<long long>(row.attempt));
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
  ProgressRelay relay{what.progress, what.progress_data, &keeper, false};
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
  request.progress = relay_progress;
  request.progress_data = &relay;
  // A large local output is synced while GDAL writes it, so the fsync of the commit does
  // not wait for all of it (see EarlySync). Tiles need no thread.
  std::unique_ptr<EarlySync> early_sync;
  if (m_options.durable && !output.is_object() && large) {
    early_sync = std::make_unique<EarlySync>(output.temp_path());
  }
  CPLDebug("IDEM", "timing: prepare %.2f ms", lap_ms(m_lap));
  GDALDatasetUniquePtr written = materialise(request);
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
    if (!m_ledger->confirm_claim(m_work.key, token)) {
      throw Error(ErrorKind::k_ledger,
                  "the ledger no longer has the claim on this work (a crash of its database "
                  "server lost it, or it was forgotten), so nothing was published; run again");
    }
    if (round == 1) {
      wait_for_earlier_work(claim.row, keeper);
    }
    // Renewed unless the claim or the last renewal is recent (a tile: no ledger write).
    if (!keeper.ensure_held()) {
      throw Error(ErrorKind::k_ledger,
                  "the claim on this work was lost before publishing "
                  "(lease expired and another worker took it over)");
    }
    keeper.poll();  // the upload or rename reports no progress
    test_pause("before_commit");
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
        throw Error(ErrorKind::k_ledger,
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
    throw Error(ErrorKind::k_ledger, replaced);
  }
  if (!m_ledger->complete(m_work.key, token, *fingerprint)) {
    // Fenced: this attempt's files do not stay where another worker's completion is recorded.
    if (output.is_object()) {
      remove_own_object(*m_ledger, m_destination, *fingerprint);
    } else {
      output.roll_back();
    }
    throw Error(ErrorKind::k_ledger,
                "the claim on this work had been taken over by another worker, so this "
                "attempt's completion was refused and what it published was taken back; that "
                "worker records the work");
  }
  if (replaced_meanwhile()) {
    // Replaced in the instant between the look above and the completion: withdrawn.
    m_ledger->invalidate(m_work.key, token);
    throw Error(ErrorKind::k_ledger, replaced);
  }
  if (!output.is_object()) {
    output.settle();
  }
}

GDALDataset* IdemCreator::run_claimed(const ClaimResult& claim,
                                      LeaseKeeper::Clock::time_point claim_sent,
                                      const WriteRequest& what) {
  const std::string& token = claim.claim_token;
  std::vector<std::string> published;
  std::optional<OutputShape> shape;  // of an object output
  CPLDebug("IDEM", "claimed %s (attempt %lld)", m_work.key.c_str(),
           static_cast<long long>(claim.attempt));
  try {
    // The directory carries the work's mark: a later worker that takes this work over removes
    // it, as this one removes those of the attempts it replaced.
    const std::string owner = m_work.key.substr(0, 16);
    AtomicOutput output(m_destination, temp_token(token, owner));
    if (claim.attempt > 1) {
      const int removed = remove_abandoned_temp_dirs(m_destination, owner, output.temp_dir());
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
    CPLDebug("IDEM", "timing: materialise %.2f ms", lap_ms(m_lap));
    published = publish_under_claim(claim, output, keeper);
    m_pre_delete.published(published);
    CPLDebug("IDEM", "timing: heartbeat+commit %.2f ms", lap_ms(m_lap));
    record_completion(token, output, keeper, published);
  } catch (...) {
    try {
      m_ledger->release(m_work.key, token);
    } catch (const Error& error) {
      CPLDebug("IDEM", "releasing the claim failed: %s", error.what());
    }
    throw;
  }
  CPLDebug("IDEM", "timing: complete %.2f ms", lap_ms(m_lap));
  test_pause("after_complete");
  GDALDataset* opened = shape ? new DeferredOutput(m_destination, published, std::move(*shape))
                              : open_output(m_destination, &published);
  CPLDebug("IDEM", "timing: open output %.2f ms", lap_ms(m_lap));
  return opened;
}

GDALDataset* idem_create_copy(const char* filename, GDALDataset* source, int /*strict*/,
                              compat::CreateCopyOptions options, GDALProgressFunc progress,
                              void* progress_data) {
  try {
    PreDelete pre_delete(filename);  // first: whatever fails below leaves the files as they were
    IdemCreator creator(pre_delete);
    return creator.create(filename, source, options, progress, progress_data);
  } catch (const Error& error) {
    CPLError(CE_Failure, error.kind() == ErrorKind::k_usage ? CPLE_IllegalArg : CPLE_AppDefined,
             "IDEM: %s", error.what());
  } catch (const std::exception& error) {
    CPLError(CE_Failure, CPLE_AppDefined, "IDEM: unexpected error: %s", error.what());
  }
  return nullptr;
}

// A deferred unlink carried out at the end of a process (a user's own delete through /vsiidem/)
// first invalidates the completed rows whose fingerprint is the file about to go (vsiidem checked
// it is still the file the unlink saw); rows of other files and rows in flight stay.
bool forget_before_unlink(const std::string& real_path) {
  const char* dsn = CPLGetConfigOption("IDEM_LEDGER", "");
  try {
    const std::optional<std::string> sqlite_path = Ledger::sqlite_path_of(dsn);
    VSIStatBufL info;
    if (sqlite_path && VSIStatL(sqlite_path->c_str(), &info) != 0) {
      return true;  // no ledger was ever made there, so no row records this output
    }
    const std::unique_ptr<Ledger> ledger = Ledger::open(dsn);
    Ledger::RowFilter filter;
    filter.output_uri = real_path;
    filter.state = RowState::k_completed;
    for (const LedgerRow& row : ledger->rows(filter)) {
      if (row.fingerprint && output_matches(real_path, *row.fingerprint, nullptr)) {
        ledger->invalidate(row.work_key, row.claim_token);
      }
    }
    return true;
  } catch (const Error& error) {
    CPLError(CE_Warning, CPLE_AppDefined,
             "IDEM: %s was not deleted because its ledger rows could not be removed first: %s",
             real_path.c_str(), error.what());
    return false;
  }
}

const char* creation_option_list() {
  return "<CreationOptionList>"
         "  <Option name='FORMAT' type='string' default='GTiff' description='The real output "
         "driver (GTiff, COG, PNG, ...); its creation options pass through'/>"
         "  <Option name='NAMESPACE' type='string' default='default' description='Keeps "
         "different flows on the same inputs apart (overrides IDEM_NAMESPACE)'/>"
         "  <Option name='LAYER' type='string' description='Layer name recorded in the ledger'/>"
         "  <Option name='TILE' type='string' description='Tile index z/x/y recorded in the "
         "ledger (found automatically for WebMercatorQuad tiles)'/>"
         "  <Option name='*' type='string' description='Any other option is a creation option "
         "of the FORMAT driver'/>"
         "  <Option name='DRIVER.*' type='string' description='A creation option of the FORMAT "
         "driver with the driver name in front (e.g. netCDF.FORMAT=NC4): the way to pass one "
         "whose name is also one of IDEM&apos;s (FORMAT, NAMESPACE, LAYER, TILE)'/>"
         "</CreationOptionList>";
}

}  // namespace

// IDEM's configuration options (docs/configuration.md), declared to GDALs that warn about
// unknown ones (3.13 with CPL_DEBUG on).
void declare_config_options() {
#if IDEM_GDAL_HAS_DECLARE_KNOWN_CONFIG_OPTION
  for (const char* name : {"IDEM_LEDGER",
                           "IDEM_NAMESPACE",
                           "IDEM_ON_BUSY",
                           "IDEM_DRY_RUN",
                           "IDEM_DRY_RUN_DIGEST_CACHE",
                           "IDEM_FSYNC",
                           "IDEM_CONDITIONAL_WRITE",
                           "IDEM_DURABLE_CLAIM",
                           "IDEM_DURABLE_COMPLETION",
                           "IDEM_KEY_GDAL_VERSION",
                           "IDEM_LEDGER_PAGE_ROWS",
                           "IDEM_LEDGER_PREOPEN",
                           "IDEM_SOURCE_DIGEST",
                           "IDEM_STALE_SECONDS",
                           "IDEM_WARP_MULTI",
                           "IDEM_WARP_REUSE_TRANSFORMER",
                           "IDEM_TEST_PAUSE_AT",
                           "IDEM_TEST_PAUSE_SECONDS",
                           "IDEM_TEST_REACHED_FILE",
                           "IDEM_TEST_RESUME_FILE"}) {
    CPLDeclareKnownConfigOption(name, nullptr);
  }
#endif
}

void register_idem_driver() {
  declare_config_options();
  install_vsiidem_handler();
  vsiidem_set_unlink_hook(forget_before_unlink);
  vsiidem_set_use_hook(note_vsiidem_use);
  if (GDALGetDriverByName(k_driver_name) != nullptr) {
    return;
  }
  auto* driver = new GDALDriver();
  driver->SetDescription(k_driver_name);
  driver->SetMetadataItem(GDAL_DCAP_RASTER, "YES");
  driver->SetMetadataItem(GDAL_DCAP_CREATECOPY, "YES");
  driver->SetMetadataItem(GDAL_DMD_LONGNAME, "Idempotent output (gdal-idem)");
  // Relative to gdal-idem's documentation (installed in /usr/share/doc/gdal-idem), as GDAL's own
  // topics are relative to GDAL's.
  driver->SetMetadataItem(GDAL_DMD_HELPTOPIC, "docs/configuration.md");
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
