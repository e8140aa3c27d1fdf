// SPDX-License-Identifier: MIT
// What the IDEM driver checks and holds around its output: the destination refused before any
// claim when it cannot be written, the datasets a source reads through (written, kept), GDAL's
// deferred pre-delete, and the dataset CreateCopy hands back.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/directory_handle.hpp"
#include "base/paths.hpp"
#include "gdal_priv.h"
#include "key/source_identity.hpp"
#include "ledger/ledger.hpp"
#include "ogr_spatialref.h"
#include "vsiidem.hpp"

namespace idem {

class AtomicOutput;

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

// Refuse before claiming when the output cannot be written, so no claim is left behind: throws
// when the directory is missing (`directory`, its handle, could not be opened); returns why when
// it is not writable (a skip needs no write access, so the caller refuses only work it would do).
std::optional<std::string> check_destination_directory(
    const std::string& destination, const std::optional<DirectoryHandle>& directory);

// A driver that writes a directory (Zarr) cannot be published to object storage, where no
// request makes a tree of objects appear at once: refused before any claim.
void check_object_output_is_a_file(const std::string& destination, GDALDriver* format_driver);

// An output path that names a directory ("/vsiidem/" alone, "out/") is refused before any claim,
// unless the directory is a dataset of `format_driver` (a Zarr output of an earlier run).
void check_destination_is_a_file(const char* filename, const std::string& destination,
                                 GDALDriver* format_driver);

std::vector<GDALDataset*> datasets_read_through(GDALDataset* source);

// ENVI writes the name it was created under into its header (`description = {...}`): for IDEM,
// the attempt's temporary path. The direct call records the name it was given, so the header of
// a closed, unpublished output written at `output`'s temporary path is made to name `given_name`
// (the output as the caller named it, without /vsiidem/), the header rewritten whole in the
// temporary directory. Nothing to do for other drivers, or a header that does not name the
// temporary path; throws idem::Error(k_io) when the header cannot be rewritten.
void name_output_in_header(GDALDriver* format_driver, const AtomicOutput& output,
                           const std::string& given_name);

// The datasets a VRT band's simple sources read, in the band's order (a dataset read twice is
// listed twice); none for a band that is not a VRT's.
std::vector<GDALDataset*> band_source_datasets(GDALRasterBand* band);

// One open for update may hold changes not yet written to its files (pixels in GDAL's block
// cache, a georeferencing set but not saved): they are written now, so that the key, which
// identifies the files' bytes, and the warp, which reads the files, see what GDAL would read
// through the handle (docs/keys.md, "Sources open for update"). A VRT made in memory has no file
// to write (gdalwarp's is open for update on GDAL 3.10), so it is not among them.
void write_pending_changes_of_sources(const std::vector<GDALDataset*>& read_through);

// A source without files (a MEM dataset), or a VRT made in memory (gdal.BuildVRT('', ...)), that
// the CreateCopy source reads from cannot be opened again by the name it is recorded under
// (often ""): the key and the warp take the caller's handle under that name instead (docs/keys.md,
// "Sources in memory"). Two such sources under one name cannot be told apart by it: refused.
void keep_sources_without_files(GDALDataset* source, const std::vector<GDALDataset*>& read_through,
                                KeptSources& kept);

// GDAL's pre-delete recorded every file of the dataset (sidecars too): keep them all.
void keep_dataset_files(GDALDataset* dataset);

// After a refused completion on object storage (no conditional write is used yet, see
// docs/object-storage.md): the object this attempt uploaded is deleted if the store still has it
// and no completed row records those bytes (a successor on the same work may have uploaded the
// very same bytes), so its pixels do not stay where another worker's completion is recorded.
void remove_own_object(WorkerLedger& ledger, const std::string& path,
                       const OutputFingerprint& ours);

// `published`: every file this attempt published. GDAL then takes the output's sidecars from that
// list instead of listing the directory (on object storage a LIST request per tile), and never
// attaches a stale sidecar that the end of the process deletes.
GDALDataset* open_output(const std::string& path,
                         const std::vector<std::string>* published = nullptr);

OutputShape shape_of(GDALDataset& dataset);

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

// The object output just uploaded, as the dataset CreateCopy returns: its size, bands and
// georeferencing from `shape`, and the object itself opened (a request to the store) only when
// something else is asked of it, with the `published` files as its siblings.
GDALDataset* new_deferred_output(const std::string& path, std::vector<std::string> published,
                                 OutputShape shape);

}  // namespace idem
