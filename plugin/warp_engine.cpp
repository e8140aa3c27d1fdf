// SPDX-License-Identifier: MIT
// Materialising the work (docs/internals.md §5, §8, §9): a warped VRT is not read block by block
// but re-run the way gdalwarp's direct mode runs it (the VRT's warp options, taken with gdalwarp's
// transformer or deserialised from <GDALWarpOptions>, the output created with the FORMAT
// driver's Create(), GDALWarpOperation::ChunkAndWarpImage());
// CreateCopy-only formats (COG, PNG, JPEG...) get that warp through a temporary GTiff; any other
// source is copied with the FORMAT driver's CreateCopy, as gdal_translate does.
#include "warp_engine.hpp"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "base/error.hpp"
#include "base/gdal_compat.hpp"
#include "base/held_messages.hpp"
#include "base/progress.hpp"
#include "cpl_conv.h"
#include "cpl_error.h"
#include "cpl_minixml.h"
#include "cpl_progress.h"
#include "cpl_string.h"
#include "cpl_vsi.h"
#include "gdal_priv.h"
#include "gdalwarp_rules.hpp"
#include "gdalwarper.h"
#include "key/work_key.hpp"
#include "vrtdataset.h"

namespace idem {

namespace {

constexpr const char* k_debug_category = "IDEM";
// Share of the progress given to the warp when a CreateCopy stage follows (what gdalwarp gives
// its own warp before a COG CreateCopy).
constexpr double k_warp_share_before_copy = 2.0 / 3.0;
// Options of the intermediate GTiff: tiled, uncompressed (it is read once, right away), sparse
// so that regions the warp leaves untouched cost nothing.
constexpr const char* const k_scratch_gtiff_options[] = {"TILED=YES", "SPARSE_OK=YES",
                                                         "BIGTIFF=IF_SAFER", nullptr};

// Owns what GDALDeserializeWarpOptions() hands back: the options, the transformer and the
// reference to the source dataset. GDALDestroyWarpOptions() frees neither of the last two, so
// they are released here, exactly once. hDstDS is never owned.
class WarpOptionsOwner {
 public:
  // `owns_transformer` false: the transformer is borrowed (from the warped VRT the options were
  // cloned from, which outlives them) and is not destroyed here.
  explicit WarpOptionsOwner(GDALWarpOptions* options, bool owns_transformer = true)
      : m_options(options), m_owns_transformer(owns_transformer) {}
  ~WarpOptionsOwner() {
    if (m_options == nullptr) {
      return;
    }
    if (m_options->pTransformerArg != nullptr && m_owns_transformer) {
      GDALDestroyTransformer(m_options->pTransformerArg);
      m_options->pTransformerArg = nullptr;
    }
    if (m_options->hSrcDS != nullptr) {
      // Opened shared by GDALDeserializeWarpOptions, or a kept source given a reference of its
      // own (warp_direct): release the reference, close only if it was the last one.
      GDALReleaseDataset(m_options->hSrcDS);
      m_options->hSrcDS = nullptr;
    }
    m_options->hDstDS = nullptr;
    GDALDestroyWarpOptions(m_options);
  }
  WarpOptionsOwner(const WarpOptionsOwner&) = delete;
  WarpOptionsOwner& operator=(const WarpOptionsOwner&) = delete;

  GDALWarpOptions* get() const { return m_options; }
  GDALWarpOptions* operator->() const { return m_options; }

 private:
  GDALWarpOptions* m_options;
  bool m_owns_transformer;
};

// Lends an initialised warp operation the datasets and progress of `ours` for a scope, and gives
// it its own back afterwards. The operation keeps what Initialize() derived from the options and
// the transformer; neither depends on which dataset objects it reads and writes.
class OperationDatasets {
 public:
  // `source_only`: the operation keeps its own output and progress (the warped VRT's blocks, read
  // by a CreateCopy from it) and reads `ours.hSrcDS` only.
  OperationDatasets(GDALWarpOperation* operation, const GDALWarpOptions& ours,
                    bool source_only = false)
      // GetOptions() hands out the operation's own (non-const) copy of its options, read-only.
      : m_theirs(const_cast<GDALWarpOptions*>(operation->GetOptions())), m_saved(*m_theirs) {
    m_theirs->hSrcDS = ours.hSrcDS;
    if (!source_only) {
      m_theirs->hDstDS = ours.hDstDS;
      m_theirs->pfnProgress = ours.pfnProgress;
      m_theirs->pProgressArg = ours.pProgressArg;
    }
  }
  ~OperationDatasets() {
    m_theirs->hSrcDS = m_saved.hSrcDS;
    m_theirs->hDstDS = m_saved.hDstDS;
    m_theirs->pfnProgress = m_saved.pfnProgress;
    m_theirs->pProgressArg = m_saved.pProgressArg;
  }
  OperationDatasets(const OperationDatasets&) = delete;
  OperationDatasets& operator=(const OperationDatasets&) = delete;

 private:
  GDALWarpOptions* m_theirs;
  GDALWarpOptions m_saved;  // a shallow copy: only the four fields above are read back
};

// Silences GDAL errors within a scope and restores the error state afterwards.
class QuietErrors {
 public:
  QuietErrors() { CPLPushErrorHandler(CPLQuietErrorHandler); }
  ~QuietErrors() { CPLPopErrorHandler(); }
  QuietErrors(const QuietErrors&) = delete;
  QuietErrors& operator=(const QuietErrors&) = delete;

 private:
  CPLErrorStateBackuper m_state;
};

// Removes an intermediate dataset (the GTiff feeding a CreateCopy-only driver) when it goes out
// of scope, whatever happened.
class ScratchDataset {
 public:
  explicit ScratchDataset(std::string path) : m_path(std::move(path)) {}
  ~ScratchDataset() {
    m_dataset.reset();
    VSIStatBufL stat;
    if (VSIStatL(m_path.c_str(), &stat) == 0) {
      QuietErrors quiet;
      if (GDALDriver* gtiff = GetGDALDriverManager()->GetDriverByName("GTiff")) {
        gtiff->Delete(m_path.c_str());
      } else {
        VSIUnlink(m_path.c_str());
      }
    }
  }
  ScratchDataset(const ScratchDataset&) = delete;
  ScratchDataset& operator=(const ScratchDataset&) = delete;

  const std::string& path() const { return m_path; }
  GDALDatasetUniquePtr& dataset() { return m_dataset; }

 private:
  std::string m_path;
  GDALDatasetUniquePtr m_dataset;
};

[[noreturn]] void throw_cancelled(const std::string& stage) {
  throw Error(ErrorKind::k_io, stage + " cancelled by the progress callback");
}

void throw_gdal_failure(const ProgressRelay& relay, const std::string& stage) {
  if (relay.cancelled()) {
    throw_cancelled(stage);
  }
  throw Error(ErrorKind::k_io, stage + " failed: " + last_gdal_error());
}

bool driver_has(GDALDriver* driver, const char* capability) {
  return driver->GetMetadataItem(capability) != nullptr;
}

// The xml:VRT serialisation of a VRTWarpedDataset (`known_xml` when the caller has it), or
// nullptr for any other dataset.
CPLXMLTreeCloser warped_vrt_tree(GDALDataset* source, const std::string* known_xml) {
  GDALDriver* driver = source->GetDriver();
  if (driver == nullptr || !EQUAL(driver->GetDescription(), "VRT")) {
    return CPLXMLTreeCloser(nullptr);
  }
  const char* text = nullptr;
  if (known_xml != nullptr && !known_xml->empty()) {
    text = known_xml->c_str();
  } else {
    CSLConstList xml = source->GetMetadata("xml:VRT");
    text = xml != nullptr ? xml[0] : nullptr;
  }
  if (text == nullptr) {
    return CPLXMLTreeCloser(nullptr);
  }
  CPLXMLTreeCloser tree(CPLParseXMLString(text));
  CPLXMLNode* root = tree.get() != nullptr ? CPLGetXMLNode(tree.get(), "=VRTDataset") : nullptr;
  if (root == nullptr || !EQUAL(CPLGetXMLValue(root, "subClass", ""), "VRTWarpedDataset") ||
      CPLGetXMLNode(root, "GDALWarpOptions") == nullptr) {
    return CPLXMLTreeCloser(nullptr);
  }
  return tree;
}

// SourceDataset is written relative to the VRT's directory; an in-memory VRT (what gdalwarp and
// rasterio hand CreateCopy) has no directory, so it is relative to the current directory
// (docs/internals.md §1).
void resolve_source_path(CPLXMLNode* warp_options, GDALDataset* vrt) {
  CPLXMLNode* source = CPLGetXMLNode(warp_options, "SourceDataset");
  if (source == nullptr) {
    return;
  }
  const char* name = CPLGetXMLValue(source, nullptr, "");
  const bool relative = CPLTestBool(CPLGetXMLValue(source, "relativeToVRT", "0"));
  const char* description = vrt->GetDescription();
  if (relative && description[0] != '\0' && !STARTS_WITH_CI(description, "<VRTDataset")) {
    const std::string vrt_dir = CPLGetPath(description);
    const std::string resolved = CPLProjectRelativeFilename(vrt_dir.c_str(), name);
    CPLDebug(k_debug_category, "warp source %s resolved to %s", name, resolved.c_str());
    CPLSetXMLValue(warp_options, "SourceDataset", resolved.c_str());
  }
  CPLSetXMLValue(warp_options, "SourceDataset.#relativeToVRT", "0");
}

// The source the key computation opened under the name the warp options give, when the warp
// would open it the same way: no open options for it in the VRT (the key's open used none).
GDALDataset* kept_source_for(const CPLXMLNode* warp_options, const KeptSources* kept_sources) {
  if (kept_sources == nullptr || CPLGetXMLNode(warp_options, "OpenOptions") != nullptr) {
    return nullptr;
  }
  // A source without a name (a MEM dataset) has no SourceDataset: kept under "".
  return kept_sources->find(CPLGetXMLValue(warp_options, "SourceDataset", ""));
}

}  // namespace

class PreparedWarp {
 public:
  explicit PreparedWarp(GDALWarpOptions* options, bool owns_transformer = true,
                        GDALWarpOperation* initialized = nullptr)
      : m_options(options, owns_transformer), m_initialized(initialized) {}
  WarpOptionsOwner& options() { return m_options; }
  // The warped VRT's own warp operation, initialised with the options these were cloned from
  // (borrowed: the VRT outlives the warp); null when the warp initialises one of its own.
  GDALWarpOperation* initialized_operation() const { return m_initialized; }
  // Whether the source is the dataset the key opened.
  bool kept_source() const { return m_kept_source; }
  void set_kept_source() { m_kept_source = true; }
  // Whether initialized_operation() ran the warp.
  bool ran_by_vrt_operation() const { return m_ran_by_vrt_operation; }
  void set_ran_by_vrt_operation() { m_ran_by_vrt_operation = true; }

 private:
  WarpOptionsOwner m_options;
  GDALWarpOperation* m_initialized;
  bool m_kept_source = false;
  bool m_ran_by_vrt_operation = false;
};

void PreparedWarpDeleter::operator()(PreparedWarp* warp) const {
  delete warp;
}

namespace {

#if IDEM_GDAL_HAS_VRT_WARPER_MEMBER
// GDAL keeps a VRTWarpedDataset's GDALWarpOperation private and offers no getter (3.6 to 3.13).
// An explicit instantiation may name a private member (C++17 [temp.spec]/6), which this one hands
// out as a member pointer: checked against this GDAL's header at compile time, no layout assumed.
// Without it (a GDAL whose member differs), the warp options are deserialised instead.
#define IDEM_ADOPTS_VRT_WARPER 1
GDALWarpOperation* VRTWarpedDataset::*vrt_warper_member();
template <GDALWarpOperation* VRTWarpedDataset::*member>
struct VrtWarperMember {
  friend GDALWarpOperation* VRTWarpedDataset::*vrt_warper_member() { return member; }
};
template struct VrtWarperMember<&VRTWarpedDataset::m_poWarper>;
#endif

}  // namespace

GDALDataset* warped_vrt_source(GDALDataset* vrt) {
#ifdef IDEM_ADOPTS_VRT_WARPER
  auto* warped = dynamic_cast<VRTWarpedDataset*>(vrt);
  GDALWarpOperation* warper = warped != nullptr ? warped->*vrt_warper_member() : nullptr;
  const GDALWarpOptions* options = warper != nullptr ? warper->GetOptions() : nullptr;
  return options != nullptr ? GDALDataset::FromHandle(options->hSrcDS) : nullptr;
#else
  (void)vrt;
  return nullptr;
#endif
}

namespace {

// The warp options gdalwarp (or rasterio, or any caller of GDALCreateWarpedVRT) gave the warped
// VRT, with the transformer it built: cloned, the transformer borrowed (the VRT, CreateCopy's
// source, outlives the warp), the source replaced by `kept`, the dataset the key digested; and
// the VRT's warp operation, initialised with them, which warp_direct() runs. What the
// transformer does is what its serialisation in the VRT says, which is in the key; the warp then
// runs with gdalwarp's own transformer and operation instead of a second pair rebuilt from that
// serialisation (PROJ's operation search again, and Initialize()'s: most of IDEM's work for
// a tile, bench/RESULTS.md). nullptr when that is not possible; the caller deserialises the options
// then.
PreparedWarpPtr adopt_vrt_warp(GDALDataset* vrt, GDALDataset* kept) {
#ifdef IDEM_ADOPTS_VRT_WARPER
  if (kept == nullptr || !CPLTestBool(CPLGetConfigOption("IDEM_WARP_REUSE_TRANSFORMER", "YES"))) {
    return nullptr;
  }
  auto* warped = dynamic_cast<VRTWarpedDataset*>(vrt);
  GDALWarpOperation* warper = warped != nullptr ? warped->*vrt_warper_member() : nullptr;
  const GDALWarpOptions* theirs = warper != nullptr ? warper->GetOptions() : nullptr;
  if (theirs == nullptr || theirs->pfnTransformer == nullptr ||
      theirs->pTransformerArg == nullptr || theirs->hSrcDS == nullptr) {
    CPLDebug(k_debug_category, "the warped VRT has no initialised warp operation (%s)",
             warper == nullptr                    ? "no operation"
             : theirs == nullptr                  ? "no options"
             : theirs->pfnTransformer == nullptr  ? "no transformer"
             : theirs->pTransformerArg == nullptr ? "no transformer argument"
                                                  : "no source");
    return nullptr;
  }
  GDALDataset* their_source = GDALDataset::FromHandle(theirs->hSrcDS);
  if (their_source->GetRasterXSize() != kept->GetRasterXSize() ||
      their_source->GetRasterYSize() != kept->GetRasterYSize() ||
      their_source->GetRasterCount() != kept->GetRasterCount()) {
    CPLDebug(k_debug_category, "the warped VRT's source is not the one the key opened");
    return nullptr;
  }
  PreparedWarpPtr prepared(new PreparedWarp(GDALCloneWarpOptions(theirs), false, warper));
  WarpOptionsOwner& options = prepared->options();
  options->hDstDS = nullptr;
  kept->Reference();
  options->hSrcDS = GDALDataset::ToHandle(kept);
  prepared->set_kept_source();
  CPLDebug(k_debug_category,
           "warp options and transformer taken from the warped VRT; source %s: the dataset "
           "opened for the key",
           kept->GetDescription());
  return prepared;
#else
  (void)vrt;
  (void)kept;
  return nullptr;
#endif
}

// The warp options of the warped VRT `vrt` (their node of its xml:VRT), deserialised with their
// transformer; the source is `kept`, the dataset the key opened, when there is one.
PreparedWarpPtr deserialize_warp(CPLXMLNode* warp_node, GDALDataset* kept) {
  if (kept != nullptr) {
    // GDALDeserializeWarpOptions would open it again: it gets no name, and the options get
    // the open dataset (with a reference of their own, released by WarpOptionsOwner).
    CPLXMLNode* source = CPLGetXMLNode(warp_node, "SourceDataset");
    CPLRemoveXMLChild(warp_node, source);
    CPLDestroyXMLNode(source);
  }

  CPLErrorReset();
  PreparedWarpPtr prepared(new PreparedWarp(GDALDeserializeWarpOptions(warp_node)));
  WarpOptionsOwner& options = prepared->options();
  if (options.get() == nullptr) {
    throw Error(ErrorKind::k_source,
                "cannot read the warp options of the warped VRT: " + last_gdal_error());
  }
  if (kept != nullptr && options->hSrcDS == nullptr) {
    kept->Reference();
    options->hSrcDS = GDALDataset::ToHandle(kept);
    prepared->set_kept_source();
    CPLDebug(k_debug_category, "warp source %s: the dataset opened for the key",
             kept->GetDescription());
  }
  if (options->hSrcDS == nullptr) {
    throw Error(ErrorKind::k_source, std::string("cannot open the warp source ") +
                                         CPLGetXMLValue(warp_node, "SourceDataset", "(none)") +
                                         ": " + last_gdal_error());
  }
  if (options->pfnTransformer == nullptr || options->pTransformerArg == nullptr) {
    throw Error(ErrorKind::k_source,
                "the warped VRT has no usable transformer: " + last_gdal_error());
  }
  return prepared;
}

// The warp itself: `vrt` describes it, `warp` holds its options, `driver` creates the output at
// `path`. Returns the output, flushed. Progress goes to `progress`/`progress_data`.
// `direct_format` is the format of the direct gdalwarp call this stands for (the FORMAT driver,
// also when the warp goes into an intermediate GTiff).
GDALDatasetUniquePtr warp_direct(GDALDataset* vrt, PreparedWarp& warp, GDALDriver* driver,
                                 const char* direct_format, const std::string& path,
                                 CSLConstList creation_options, const ProgressRelay& relay,
                                 GDALProgressFunc progress, void* progress_data) {
  WarpOptionsOwner& options = warp.options();
  const int band_count = vrt->GetRasterCount();
  if (band_count == 0) {
    throw Error(ErrorKind::k_source, "the warped VRT has no band");
  }
  const GDALDataType data_type = vrt->GetRasterBand(1)->GetRasterDataType();
  CPLDebug(k_debug_category, "warp into %s (%s), %dx%dx%d %s", path.c_str(),
           driver->GetDescription(), vrt->GetRasterXSize(), vrt->GetRasterYSize(), band_count,
           GDALGetDataTypeName(data_type));

  GDALDatasetUniquePtr output(driver->Create(path.c_str(), vrt->GetRasterXSize(),
                                             vrt->GetRasterYSize(), band_count, data_type,
                                             const_cast<char**>(creation_options)));
  if (!output) {
    throw Error(ErrorKind::k_io, std::string("cannot create ") + path + " with " +
                                     driver->GetDescription() + ": " + last_gdal_error());
  }
  copy_dataset_info(vrt, output.get(), EQUAL(driver->GetDescription(), "GTiff"));
  // The VRT's own operation was initialised with the VRT's alpha maximum.
  const bool alpha_max_changed = set_destination_alpha_max(*options.get(), vrt, output.get());

  options->hDstDS = GDALDataset::ToHandle(output.get());
  options->pfnProgress = progress;
  options->pProgressArg = progress_data;

  // -multi is not serialised (docs/internals.md §9); NUM_THREADS is the warp's own request for
  // threads.
  const bool multi = CSLFetchNameValue(options->papszWarpOptions, "NUM_THREADS") != nullptr ||
                     CPLTestBool(CPLGetConfigOption("IDEM_WARP_MULTI", "NO"));
  const WarpWindow window =
      gdalwarp_window(*options.get(), output.get(),
                      gdalwarp_skips_nosource(*options.get(), output.get(), direct_format));
  const auto run = [&](GDALWarpOperation& operation) {
    return multi ? operation.ChunkAndWarpMulti(window.x_off, window.y_off, window.x_size,
                                               window.y_size)
                 : operation.ChunkAndWarpImage(window.x_off, window.y_off, window.x_size,
                                               window.y_size);
  };
  CPLErr status = CE_Failure;
  if (window.x_size <= 0 || window.y_size <= 0) {
    // The source's footprint misses the output: gdalwarp warps nothing either.
    CPLDebug(k_debug_category, "RPC source: its footprint misses the output");
    status = CE_None;
  } else if (GDALWarpOperation* initialized =
                 alpha_max_changed ? nullptr : warp.initialized_operation()) {
    // The VRT's operation, initialised by gdalwarp with these very options, runs with the kept
    // source and the output in place of its own, which it gets back afterwards.
    OperationDatasets swapped(initialized, *options.get());
    CPLDebug(k_debug_category, "warp run by the warped VRT's warp operation");
    warp.set_ran_by_vrt_operation();
    status = run(*initialized);
  } else {
    GDALWarpOperation operation;
    status = operation.Initialize(options.get());
    if (status == CE_None) {
      status = run(operation);
    }
  }
  options->hDstDS = nullptr;
  if (status != CE_None || relay.cancelled()) {
    throw_gdal_failure(relay, "warp");
  }
  // The blocks the warp left in GDAL's cache are written now: a failure to write them fails the
  // work, whatever the warp reported before (a failure the warp tolerated, of PROJ at a corner,
  // must not hide one of the writes: MBTiles refuses every block of a grid it did not accept).
  CPLErrorReset();
  output->FlushCache(false);
  if (CPLGetLastErrorType() == CE_Failure) {
    throw_gdal_failure(relay, "writing the warp output");
  }
  return output;
}

GDALDatasetUniquePtr create_copy(GDALDriver* driver, const std::string& path, GDALDataset* source,
                                 CSLConstList creation_options, const ProgressRelay& relay,
                                 GDALProgressFunc progress, void* progress_data) {
  // The path is a fresh temporary name: GDAL's pre-delete (docs/internals.md §4) has nothing to do
  // there.
  CPLStringList options(creation_options);
  options.SetNameValue(IDEM_QUIET_DELETE_ON_CREATE_COPY, "NO");
  CPLDebug(k_debug_category, "CreateCopy %s (%s) from %s", path.c_str(), driver->GetDescription(),
           source->GetDescription());
  CPLErrorReset();
  GDALDatasetUniquePtr output(
      driver->CreateCopy(path.c_str(), source, FALSE, options.List(), progress, progress_data));
  if (!output || relay.cancelled()) {
    output.reset();
    throw_gdal_failure(relay, std::string(driver->GetDescription()) + " CreateCopy");
  }
  CPLErrorReset();  // as after a warp: the flush's own failures
  output->FlushCache(false);
  if (CPLGetLastErrorType() == CE_Failure) {
    throw_gdal_failure(relay, std::string("writing ") + path);
  }
  return output;
}

// A warp into a CreateCopy-only format other than COG, written as GDAL writes it with that format
// named directly: the format's CreateCopy reads the warped VRT block by block (docs/internals.md
// §14), whose pixels are not those of a warp done first (§8) but are the direct call's. The VRT's
// warp operation reads the dataset the key opened (its digest is in the key) in place of the
// caller's handle, which it gets back afterwards; blocks the VRT computed before from that handle
// are dropped first, so that none is copied.
GDALDatasetUniquePtr copy_warped_vrt(GDALDataset* vrt, PreparedWarp& warp, GDALDriver* driver,
                                     const std::string& path, CSLConstList creation_options,
                                     const ProgressRelay& relay, GDALProgressFunc progress,
                                     void* progress_data) {
  const auto drop_computed_blocks = [vrt] {
    for (int band = 1; band <= vrt->GetRasterCount(); ++band) {
      vrt->GetRasterBand(band)->FlushCache(false);
    }
  };
  GDALWarpOperation* operation = warp.kept_source() ? warp.initialized_operation() : nullptr;
  std::optional<OperationDatasets> swapped;
  if (operation != nullptr) {
    drop_computed_blocks();
    swapped.emplace(operation, *warp.options().get(), true);
    warp.set_ran_by_vrt_operation();
  }
  CPLDebug(k_debug_category, "CreateCopy %s (%s) from the warped VRT%s", path.c_str(),
           driver->GetDescription(),
           operation != nullptr ? ", reading the dataset opened for the key" : "");
  GDALDatasetUniquePtr output =
      create_copy(driver, path, vrt, creation_options, relay, progress, progress_data);
  if (operation != nullptr) {
    drop_computed_blocks();  // computed from the key's dataset: the caller's VRT reads its own
  }
  return output;
}

// Up to this many bytes of pixels, the GeoTIFF a CreateCopy-only format is copied from is kept
// in memory (/vsimem/, this process's own): a 256x256 tile then costs no file created, written,
// read back and deleted. Larger ones go beside the output, on its disk.
constexpr int64_t k_scratch_in_memory_max = int64_t{16} << 20;

std::string scratch_path_for(const MaterialiseRequest& request) {
  GDALDataset* source = request.source;
  const int64_t pixels = int64_t{source->GetRasterXSize()} * source->GetRasterYSize();
  int64_t bytes_per_pixel = 0;
  for (int band = 1; band <= source->GetRasterCount(); ++band) {
    bytes_per_pixel += GDALGetDataTypeSizeBytes(source->GetRasterBand(band)->GetRasterDataType());
  }
  if (bytes_per_pixel > 0 && pixels <= k_scratch_in_memory_max / bytes_per_pixel) {
    static std::atomic<unsigned> counter{0};
    return CPLSPrintf("/vsimem/idem-scratch-%u-%s.idem-warp.tif", counter++,
                      CPLGetBasename(request.output_path.c_str()));
  }
  const std::string dir =
      request.scratch_dir.empty() ? CPLGetPath(request.output_path.c_str()) : request.scratch_dir;
  const std::string name = std::string(CPLGetBasename(request.output_path.c_str())) + ".idem-warp";
  return CPLFormFilename(dir.c_str(), name.c_str(), "tif");
}

GDALDatasetUniquePtr materialise_unchecked(const MaterialiseRequest& request,
                                           ProgressRelay& relay) {
  GDALDriver* driver = request.format_driver;
  const bool can_create = driver_has(driver, GDAL_DCAP_CREATE);
  const bool can_create_copy = driver_has(driver, GDAL_DCAP_CREATECOPY);
  // A VRT output of a warped VRT is its serialisation: copy it.
  const bool writes_pixels = !EQUAL(driver->GetDescription(), "VRT");

  if (request.gdalwarp_arguments != nullptr && writes_pixels) {
    if (request.report != nullptr) {
      request.report->warped = true;
      request.report->kept_source = true;
      request.report->ran_gdalwarp = true;
    }
    ScaledProgress stage(0.0, 1.0, relay);
    try {
      return run_gdalwarp(request.gdalwarp_sources, *request.gdalwarp_arguments,
                          driver->GetDescription(), request.output_path,
                          request.creation_options.List(), stage.function(), stage.data());
    } catch (const Error&) {
      if (relay.cancelled()) {
        throw_cancelled("the warp");
      }
      throw;
    }
  }

  PreparedWarpPtr own_warp;
  PreparedWarp* warp = writes_pixels ? request.prepared_warp : nullptr;
  if (warp == nullptr && writes_pixels) {
    own_warp = prepare_warp(request.source, request.vrt_xml, request.kept_sources);
    warp = own_warp.get();
  }
  if (warp != nullptr && request.report != nullptr) {
    request.report->warped = true;
    request.report->options_adopted = warp->initialized_operation() != nullptr;
    request.report->kept_source = warp->kept_source();
  }
  // Notes who ran the warp, once it has run.
  const auto reported = [&](GDALDatasetUniquePtr output) {
    if (request.report != nullptr) {
      request.report->ran_vrt_operation = warp->ran_by_vrt_operation();
    }
    return output;
  };
  if (warp == nullptr) {
    // gdal_translate's path: CreateCopy (GDALDriver falls back to Create + copy of the whole
    // raster for Create-only drivers).
    ScaledProgress stage(0.0, 1.0, relay);
    return create_copy(driver, request.output_path, request.source, request.creation_options.List(),
                       relay, stage.function(), stage.data());
  }

  if (warp_copies_from_vrt(driver->GetDescription())) {
    if (request.report != nullptr) {
      request.report->copied_vrt = true;
      // The caller's VRT reads the key's dataset only through its own, adopted operation.
      request.report->kept_source = warp->kept_source() && warp->initialized_operation() != nullptr;
    }
    ScaledProgress stage(0.0, 1.0, relay);
    return reported(copy_warped_vrt(request.source, *warp, driver, request.output_path,
                                    request.creation_options.List(), relay, stage.function(),
                                    stage.data()));
  }
  // COG gained a Create in GDAL 3.13 that drops band descriptions; gdalwarp writes a COG from a
  // GeoTIFF it warped first, on every release, and so does IDEM (docs/internals.md §5).
  if (can_create && !EQUAL(driver->GetDescription(), "COG")) {
    ScaledProgress stage(0.0, 1.0, relay);
    return reported(warp_direct(request.source, *warp, driver, driver->GetDescription(),
                                request.output_path, request.creation_options.List(), relay,
                                stage.function(), stage.data()));
  }
  if (!can_create_copy) {
    throw Error(ErrorKind::k_usage, std::string("the driver ") + driver->GetDescription() +
                                        " can neither Create nor CreateCopy a dataset: name a "
                                        "FORMAT that writes files (GTiff, COG, PNG...)");
  }
  GDALDriver* gtiff = GetGDALDriverManager()->GetDriverByName("GTiff");
  if (gtiff == nullptr) {
    throw Error(ErrorKind::k_internal, "the GTiff driver is not available");
  }
  // Fact 7: a CreateCopy-only driver (COG above all) gets a materialised GTiff, never the VRT.
  ScratchDataset scratch(scratch_path_for(request));
  {
    ScaledProgress stage(0.0, k_warp_share_before_copy, relay);
    scratch.dataset() =
        reported(warp_direct(request.source, *warp, gtiff, driver->GetDescription(), scratch.path(),
                             k_scratch_gtiff_options, relay, stage.function(), stage.data()));
  }
  ScaledProgress stage(k_warp_share_before_copy, 1.0, relay);
  return create_copy(driver, request.output_path, scratch.dataset().get(),
                     request.creation_options.List(), relay, stage.function(), stage.data());
}

// Leaves nothing at the output path after a failure (the caller removes its directory too, but a
// half-written file must not survive a cancelled attempt in any case).
void remove_partial_output(const MaterialiseRequest& request) {
  VSIStatBufL stat;
  if (VSIStatL(request.output_path.c_str(), &stat) != 0) {
    return;
  }
  QuietErrors quiet;
  if (request.format_driver->Delete(request.output_path.c_str()) != CE_None) {
    VSIUnlink(request.output_path.c_str());
  }
}

}  // namespace

GDALDataset* kept_warp_source(GDALDataset* vrt, const std::string& vrt_xml,
                              const KeptSources& kept_sources) {
  CPLXMLTreeCloser tree = warped_vrt_tree(vrt, &vrt_xml);
  if (tree.get() == nullptr) {
    return nullptr;
  }
  CPLXMLNode* warp_node = CPLGetXMLNode(tree.get(), "=VRTDataset.GDALWarpOptions");
  resolve_source_path(warp_node, vrt);
  return kept_source_for(warp_node, &kept_sources);
}

PreparedWarpPtr prepare_warp(GDALDataset* source, const std::string* vrt_xml,
                             const KeptSources* kept_sources) {
  CPLXMLTreeCloser tree = warped_vrt_tree(source, vrt_xml);
  if (tree.get() == nullptr) {
    return nullptr;
  }
  CPLXMLNode* warp_node = CPLGetXMLNode(tree.get(), "=VRTDataset.GDALWarpOptions");
  resolve_source_path(warp_node, source);
  GDALDataset* kept = kept_source_for(warp_node, kept_sources);
  if (PreparedWarpPtr adopted = adopt_vrt_warp(source, kept)) {
    return adopted;
  }
  return deserialize_warp(warp_node, kept);
}

GDALDatasetUniquePtr materialise(const MaterialiseRequest& request) {
  if (request.source == nullptr || request.format_driver == nullptr ||
      request.output_path.empty()) {
    throw Error(ErrorKind::k_internal,
                "the output was to be written without a source, a driver or an output path");
  }
  ProgressRelay relay(request.progress, request.progress_data);
  GDALDatasetUniquePtr output;
  try {
    output = materialise_unchecked(request, relay);
    if (!ProgressRelay::forward(1.0, "", &relay)) {
      throw_cancelled("materialisation");
    }
  } catch (...) {
    output.reset();
    remove_partial_output(request);
    throw;
  }
  return output;
}

}  // namespace idem
