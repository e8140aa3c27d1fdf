// gdalwarp's own decisions about a warp it runs itself, made the same way for IDEM's warp: what it
// sets on the output, which chunks it skips, which window of an RPC warp it computes
// (docs/internals.md §9, §10). Internal to plugin/.
#pragma once

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

}  // namespace idem
