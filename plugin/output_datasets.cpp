// SPDX-License-Identifier: MIT
// What the IDEM driver checks and holds around its output (output_datasets.hpp).
#include "output_datasets.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>

#include "base/error.hpp"
#include "base/gdal_compat.hpp"
#include "base/paths.hpp"
#include "base/write_whole.hpp"
#include "cpl_conv.h"
#include "cpl_string.h"
#include "gdal_proxy.h"
#include "store/object_store.hpp"
#include "vsiidem.hpp"
#include "warp_engine.hpp"
#include "work/atomic_output.hpp"
#include "work/output_check.hpp"

namespace idem {

namespace {

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

void add_read_through(GDALDataset* dataset, std::vector<GDALDataset*>& held, int depth) {
  if (dataset == nullptr) {
    return;
  }
  if (depth > k_max_vrt_depth) {
    throw Error(ErrorKind::k_source,
                "VRTs made in memory are nested more than " + std::to_string(k_max_vrt_depth) +
                    " levels deep (or one reads itself): write the inner VRTs to files "
                    "(gdal.BuildVRT('inner.vrt', ...)) or flatten them");
  }
  std::vector<GDALDataset*> found;
  if (GDALDataset* warped_from = warped_vrt_source(dataset)) {
    found.push_back(warped_from);
  }
  if (is_vrt_in_memory(dataset) && dynamic_cast<VRTWarpedDataset*>(dataset) == nullptr) {
    for (int i = 1; i <= dataset->GetRasterCount(); ++i) {
      const std::vector<GDALDataset*> read = band_source_datasets(dataset->GetRasterBand(i));
      found.insert(found.end(), read.begin(), read.end());
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

}  // namespace

std::vector<GDALDataset*> band_source_datasets(GDALRasterBand* band) {
  std::vector<GDALDataset*> datasets;
  auto* sourced = dynamic_cast<VRTSourcedRasterBand*>(band);
  if (sourced == nullptr) {
    return datasets;
  }
  for (VRTSource* vrt_source : compat::vrt_band_sources(sourced)) {
    if (!vrt_source->IsSimpleSource()) {
      continue;
    }
    GDALRasterBand* from = static_cast<VRTSimpleSource*>(vrt_source)->GetRasterBand();
    if (from != nullptr && from->GetDataset() != nullptr) {
      datasets.push_back(from->GetDataset());
    }
  }
  return datasets;
}

// Refuse before claiming when the output cannot be written, so no claim is left behind: a
// missing directory at once; an unwritable one is returned, for the caller to refuse unless the
// work is completed (a skip writes nothing).
std::optional<std::string> check_destination_directory(
    const std::string& destination, const std::optional<DirectoryHandle>& directory_handle) {
  if (is_object_store_path(destination)) {
    return std::nullopt;  // an unwritable bucket fails the upload, which releases the claim
  }
  const std::string directory = dirname_of(destination);
  if (!directory_handle) {
    throw DestinationRefused("the destination directory " + directory +
                             " does not exist; create it first (mkdir -p)");
  }
  if (::faccessat(directory_handle->fd(), ".", W_OK, AT_EACCESS) != 0) {
    return "the destination directory " + directory + " is not writable (" + std::strerror(errno) +
           "); fix its permissions or write elsewhere";
  }
  return std::nullopt;
}

// An output path that names a directory ("/vsiidem/" alone, "out/") is refused before any claim.
void check_destination_is_a_file(const char* filename, const std::string& destination,
                                 GDALDriver* format_driver) {
  const std::string given = filename;
  VSIStatBufL info;
  const bool names_a_directory = given.empty() || given.back() == '/' || destination == "/";
  const bool is_directory = !is_object_store_path(destination) &&
                            VSIStatL(destination.c_str(), &info) == 0 && VSI_ISDIR(info.st_mode);
  const auto is_dataset_of_format = [&] {
    const char* const only[] = {format_driver->GetDescription(), nullptr};
    CPLErrorHandlerPusher quiet(CPLQuietErrorHandler);
    return GDALIdentifyDriverEx(destination.c_str(), GDAL_OF_RASTER, only, nullptr) != nullptr;
  };
  if (names_a_directory || (is_directory && !is_dataset_of_format())) {
    throw DestinationRefused("the output '" + given + "' names a directory (" + destination +
                             "), not a file: give the output file's name, e.g. "
                             "/vsiidem/tiles/out.tif");
  }
}

// The drivers whose dataset is a directory of files (docs/vsiidem.md, "Directory datasets").
void check_object_output_is_a_file(const std::string& destination, GDALDriver* format_driver) {
  const std::string driver = format_driver->GetDescription();
  if (is_object_store_path(destination) &&
      (EQUAL(driver.c_str(), "Zarr") || EQUAL(driver.c_str(), "TileDB"))) {
    throw DestinationRefused(
        "IDEM cannot publish a " + driver + " dataset to object storage (" + destination +
        "): it is a directory of many objects, which no request makes appear at "
        "once. Write it to a local path through /vsiidem/ and copy the directory to "
        "the bucket after, or write a single-file format (-co FORMAT=COG)");
  }
}

void name_output_in_header(GDALDriver* format_driver, const AtomicOutput& output,
                           const std::string& given_name) {
  if (!EQUAL(format_driver->GetDescription(), "ENVI")) {
    return;
  }
  // The header is <name>.hdr, or <name>.<ext>.hdr with SUFFIX=ADD (GDAL 3.6 to 3.13), in the
  // temporary directory, rewritten whole through its handle (write_file_atomically).
  const std::string& temp_path = output.temp_path();
  const std::string written = "description = {\n" + temp_path + "}\n";
  const std::string primary = basename_of(temp_path);
  for (const std::string& header :
       {std::string(CPLResetExtension(primary.c_str(), "hdr")), primary + ".hdr"}) {
    std::optional<std::string> text = read_regular_file_at(output.temp_handle(), header);
    const std::size_t at = text ? text->find(written) : std::string::npos;
    if (at == std::string::npos) {
      continue;
    }
    text->replace(at, written.size(), "description = {\n" + given_name + "}\n");
    write_file_atomically(output.temp_handle(), header, *text);
  }
}

// The datasets the CreateCopy source reads its pixels through, as the caller holds them: the
// source itself (unless it is a VRT made in memory), a warped VRT's source, and the sources of a
// VRT made in memory (gdal_translate's, gdal.Translate's, gdal.BuildVRT('', ...)), through any
// depth of VRTs made in memory.

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
// "Sources in memory"). A dataset without files whose name another such source shares (two
// unnamed MEM datasets in one VRT) is kept under a name of its own (KeptSources::keep_aliased),
// which the key reads in the VRT in place of the shared one. Two VRTs made in memory under one
// name cannot be told apart: refused.
void keep_sources_without_files(GDALDataset* source, const std::vector<GDALDataset*>& read_through,
                                KeptSources& kept) {
  std::map<std::string, std::vector<GDALDataset*>> by_name;
  for (GDALDataset* dataset : read_through) {
    if (dataset == source || !held_not_reopened(dataset)) {
      continue;  // handed over itself, or opened again by its name, as its files are now
    }
    std::vector<GDALDataset*>& named = by_name[dataset->GetDescription()];
    if (std::find(named.begin(), named.end(), dataset) == named.end()) {
      named.push_back(dataset);
    }
  }
  for (const auto& [name, datasets] : by_name) {
    const auto vrts = std::count_if(datasets.begin(), datasets.end(), is_vrt_in_memory);
    if (vrts > 1) {
      throw Error(ErrorKind::k_usage,
                  "two VRTs made in memory are both named '" + name +
                      "', so they cannot be told apart: build each as /vsimem/NAME.vrt, with its "
                      "own NAME");
    }
    for (GDALDataset* dataset : datasets) {
      dataset->Reference();
      if (datasets.size() > 1 && !is_vrt_in_memory(dataset)) {
        kept.keep_aliased(dataset);
      } else {
        kept.keep(name, dataset);
      }
    }
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

// After a refused completion on object storage: the object this attempt uploaded is deleted if
// the store still has it and no completed row records those bytes (a successor on the same work
// may have uploaded the very same bytes), so its pixels do not stay where another worker's
// completion is recorded. Only with a conditional delete (S3): where the look and the delete
// are two requests, a successor's object put there between them would go, so nothing is
// deleted and the completion recorded there, no longer matching, makes its next run rebuild.
void remove_own_object(WorkerLedger& ledger, const std::string& path,
                       const OutputFingerprint& ours) {
  std::vector<OutputFingerprint> recorded;
  for (const LedgerRow& row : ledger.rows_on_output(path, RowState::k_completed)) {
    if (row.fingerprint) {
      recorded.push_back(*row.fingerprint);
    }
  }
  switch (delete_recorded_object(path, ours, recorded, true)) {
    case DeleteOutcome::k_deleted:
      CPLDebug("IDEM", "removed %s, uploaded by this attempt after its claim was lost",
               path.c_str());
      break;
    case DeleteOutcome::k_not_ours:
      CPLDebug("IDEM",
               "left %s in place: another completion records it, another writer replaced it, or "
               "this store takes no conditional delete",
               path.c_str());
      break;
    case DeleteOutcome::k_absent:
    case DeleteOutcome::k_failed:
      break;
  }
}

// `published`: every file this attempt published. GDAL then takes the output's sidecars from that
// list instead of listing the directory (on object storage a LIST request per tile), and never
// attaches a stale sidecar that the end of the process deletes.
GDALDataset* open_output(const std::string& path, const std::vector<std::string>* published) {
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

GDALDataset* new_deferred_output(const std::string& path, std::vector<std::string> published,
                                 OutputShape shape) {
  return new DeferredOutput(path, std::move(published), std::move(shape));
}

}  // namespace idem
