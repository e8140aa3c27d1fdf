// SPDX-License-Identifier: MIT
// gdalwarp's own decisions about a warp it runs itself, made the same way for IDEM's warp: what it
// sets on the output, which chunks it skips, which window of an RPC warp it computes
// (docs/internals.md §9, §10). Internal to plugin/.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gdal_priv.h"
#include "gdalwarper.h"

namespace idem {

struct WarpWindow {
  int x_off = 0;
  int y_off = 0;
  int x_size = 0;
  int y_size = 0;
};

// What gdalwarp sets on the output it creates (and, in VRT mode, on the VRT): georeferencing,
// metadata, and per band nodata, colour interpretation, colour table, description, metadata,
// offset/scale, unit and attribute table. gdalwarp sets the colour interpretation of an output
// it creates itself only with -setci and for the alpha band of -dstalpha (GeoTIFFs get theirs
// from PHOTOMETRIC); the VRT carries it always: `all_colour_interpretations` is true for a
// GeoTIFF, and otherwise only an alpha band's is set (docs/internals.md §9).
void copy_dataset_info(GDALDataset* vrt, GDALDataset* output, bool all_colour_interpretations);

// gdalwarp sets DST_ALPHA_MAX from the alpha band of the output it warps into: its NBITS
// (-co NBITS=15: 32767), else its type's maximum. The warped VRT's options hold the value for the
// VRT's own alpha band, which has no NBITS; unless it was chosen (-wo DST_ALPHA_MAX, a value
// other than the VRT band's), it is set again from `output`'s. True when it changed.
bool set_destination_alpha_max(GDALWarpOptions& options, GDALDataset* vrt, GDALDataset* output);

// Whether gdalwarp, creating `output` in `format` itself, would skip the chunks that have no
// source (SKIP_NOSOURCE=YES, set for new GTiff, GPKG and MEM outputs when INIT_DEST agrees with
// the output's nodata; docs/internals.md §10). The pixels do not depend on it; the RPC window
// below does.
bool gdalwarp_skips_nosource(const GDALWarpOptions& options, GDALDataset* output,
                             const char* format);

// gdalwarp's restriction of an RPC warp into a new output (its AdjustOutputExtentForRPC): RPCs
// can find source pixels for points outside the source's footprint, so gdalwarp warps only the
// footprint's bounding box plus 5 pixels, unless RESTRICT_OUTPUT_DATASET_UPDATE=NO. Returns the
// window to warp, empty when the footprint misses the output (docs/internals.md §10).
WarpWindow gdalwarp_window(const GDALWarpOptions& options, GDALDataset* output, bool skip_nosource);

// What the gdalwarp program was asked, for outputs GDAL hands IDEM without gdalwarp's options
// (docs/internals.md §12):
// - a plain mosaic of several sources (no reprojection, grid, -ot, -to or cutline; every source
//   north-up with the same bands, CRS and resolution) reaches a driver without Create as
//   gdalbuildvrt's VRT, which has none of the options that gdalwarp, writing a format with Create
//   (or a COG with grid options), applies (nodata, resampling, -wo, metadata copied from the
//   sources...);
// - several sources warped otherwise reach it as the temporary GeoTIFF gdalwarp warped them into,
//   which for a COG with grid options is not the grid gdalwarp -of COG warps onto (§11).
// Where the process is the gdalwarp program, its command line says them all: the output is then
// written by GDALWarp() with those options, as gdalwarp would have written it.
class GdalwarpCommand {
 public:
  // gdalwarp's call for the VRT `mosaic`, to be written in `format`, read from this process's
  // command line (or, for `gdal-idem key`, from IDEM_INTERNAL_GDALWARP_COMMAND); nullptr when
  // the process is not gdalwarp (with a warning when GDAL's GDALWarp() called the driver: its
  // options cannot be seen). When the command cannot be read or its sources are not the VRT's, a
  // warning says so and nullptr is returned: the mosaic is then written from the VRT.
  static std::unique_ptr<GdalwarpCommand> of_this_process(GDALDataset* mosaic, const char* format);
  // gdalwarp's call that warps into `destination` (the absolute real path of the output,
  // /vsiidem/ taken off), read the same way: for a warp GDAL hands over as a warped VRT, or
  // several sources it warped into a temporary file first. nullptr when the process is not
  // gdalwarp, its command cannot be read (a debug message says why) or names another
  // destination.
  static std::unique_ptr<GdalwarpCommand> of_this_process_warping_into(
      const std::string& destination);
  // The same from gdalwarp's arguments (argv[0] first) and the names of the VRT's sources, in
  // order. Throws idem::Error(k_usage) saying what could not be read. Exposed for tests.
  static std::unique_ptr<GdalwarpCommand> of_command(const std::vector<std::string>& argv,
                                                     const std::vector<std::string>& source_names);

  // gdalwarp's options as given, less -of, -co, -overwrite and -q (the run adds its own).
  const std::vector<std::string>& arguments() const { return m_arguments; }
  // What the key records: the options less those that change nothing in the output (-wm,
  // -multi, -wo NUM_THREADS=).
  std::vector<std::string> key_arguments() const;
  // Whether the options hold `name` (-te...).
  bool has_option(const char* name) const;
  // The sources the command names (of_this_process_warping_into()).
  const std::vector<std::string>& source_names() const { return m_source_names; }
  // The sources, opened (once) as gdalwarp opened them: for a mosaic, from the VRT `mosaic`'s,
  // else by the names the command gives, with its -oo and -if; they live as long as this object.
  // Throws idem::Error(k_source) when one cannot be opened.
  std::vector<GDALDataset*> open_sources(GDALDataset* mosaic);

 private:
  std::vector<std::string> m_arguments;
  std::vector<std::string> m_source_names;
  CPLStringList m_open_options;
  CPLStringList m_input_drivers;
  std::vector<GDALDataset*> m_sources;
  std::vector<GDALDatasetUniquePtr> m_opened;
};

// Whether GDAL's GDALWarp() is on this thread's call stack (found by its exported name): the
// caller of a driver's CreateCopy is then gdalwarp's library (gdal.Warp...), not gdal_translate's.
bool called_from_gdalwarp_library();

// The names of the datasets a mosaic VRT reads, in order (its first band's sources).
std::vector<std::string> mosaic_source_names(GDALDataset* mosaic);

// GDALWarp(`arguments` -of `format` -co `creation_options`) of `sources` into `path`: what
// `gdalwarp -of FORMAT` does. Throws idem::Error (k_io, "cancelled" when the progress callback
// stopped it; k_usage when gdalwarp refused the arguments).
GDALDatasetUniquePtr run_gdalwarp(const std::vector<GDALDataset*>& sources,
                                  const std::vector<std::string>& arguments, const char* format,
                                  const std::string& path, CSLConstList creation_options,
                                  GDALProgressFunc progress, void* progress_data);

}  // namespace idem
