// gdalwarp's own decisions about a warp it runs itself, made the same way for IDEM's warp
// (gdalwarp_rules.hpp).
#include "gdalwarp_rules.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <string>

#include "base/error.hpp"
#include "base/gdal_compat.hpp"
#include "base/held_messages.hpp"
#include "cpl_conv.h"
#include "cpl_minixml.h"
#include "cpl_string.h"
#include "gdal_alg.h"
#include "gdal_priv.h"

namespace idem {

namespace {

constexpr const char* k_debug_category = "IDEM";

// gdalwarp reads an INIT_DEST value within float rounding of the float range's ends as that end.
double adjust_close_to_float_max(double value) {
  constexpr double k_float_max = std::numeric_limits<float>::max();
  if (std::fabs(value - k_float_max) < 1e-10 * k_float_max) {
    return k_float_max;
  }
  if (std::fabs(value + k_float_max) < 1e-10 * k_float_max) {
    return -k_float_max;
  }
  return value;
}

// Whether the source transformer in a serialised GenImgProjTransformer is one gdalwarp chooses
// for an RPC source with METHOD unset or METHOD=RPC: the RPC transformer, or the source's
// geotransform or GCPs that GDAL prefers to its RPCs when no METHOD is given. A METHOD naming the
// default explicitly is not told apart (docs/internals.md §10).
bool rpc_method(const CPLXMLNode* gen_img_proj, GDALDataset* source) {
  if (CPLGetXMLNode(gen_img_proj, "SrcRPCTransformer") != nullptr) {
    return true;
  }
  double geotransform[6];
  const bool has_geotransform = compat::get_geotransform(source, geotransform) == CE_None;
  if (CPLGetXMLNode(gen_img_proj, "SrcGeoTransform") != nullptr) {
    return has_geotransform;
  }
  return CPLGetXMLNode(gen_img_proj, "SrcGCPTransformer") != nullptr && !has_geotransform &&
         source->GetGCPCount() > 0;
}

}  // namespace

// What gdalwarp sets on the output it creates (and, in VRT mode, on the VRT): georeferencing,
// metadata, and per band nodata, colour interpretation, colour table, description, metadata,
// offset/scale, unit and attribute table. gdalwarp sets the colour interpretation of an output
// it creates itself only with -setci and for the alpha band of -dstalpha (GeoTIFFs get theirs
// from PHOTOMETRIC); the VRT carries it always: `all_colour_interpretations` is true for a
// GeoTIFF, and otherwise only an alpha band's is set (docs/internals.md §9).
void copy_dataset_info(GDALDataset* vrt, GDALDataset* output, bool all_colour_interpretations) {
  double geotransform[6];
  if (compat::get_geotransform(vrt, geotransform) == CE_None) {
    compat::set_geotransform(output, geotransform);
  }
  if (const OGRSpatialReference* srs = vrt->GetSpatialRef()) {
    output->SetSpatialRef(srs);
  }
  // GetMetadata returns CSLConstList since 3.13 and SetMetadata takes one; both char** before.
  if (CSLConstList metadata = vrt->GetMetadata()) {
    output->SetMetadata(const_cast<char**>(metadata));
  }
  for (int i = 1; i <= vrt->GetRasterCount(); ++i) {
    GDALRasterBand* from = vrt->GetRasterBand(i);
    GDALRasterBand* to = output->GetRasterBand(i);
    int has_nodata = FALSE;
    if (from->GetRasterDataType() == GDT_Int64) {
      const auto value = from->GetNoDataValueAsInt64(&has_nodata);
      if (has_nodata) {
        to->SetNoDataValueAsInt64(value);
      }
    } else if (from->GetRasterDataType() == GDT_UInt64) {
      const auto value = from->GetNoDataValueAsUInt64(&has_nodata);
      if (has_nodata) {
        to->SetNoDataValueAsUInt64(value);
      }
    } else {
      const double value = from->GetNoDataValue(&has_nodata);
      if (has_nodata) {
        to->SetNoDataValue(value);
      }
    }
    const GDALColorInterp interp = from->GetColorInterpretation();
    if (interp != GCI_Undefined && (all_colour_interpretations || interp == GCI_AlphaBand)) {
      to->SetColorInterpretation(interp);
    }
    if (GDALColorTable* table = from->GetColorTable()) {
      to->SetColorTable(table);
    }
    if (from->GetDescription()[0] != '\0') {
      to->SetDescription(from->GetDescription());
    }
    if (CSLConstList metadata = from->GetMetadata()) {
      to->SetMetadata(const_cast<char**>(metadata));
    }
    int has_offset = FALSE;
    int has_scale = FALSE;
    const double offset = from->GetOffset(&has_offset);
    const double scale = from->GetScale(&has_scale);
    if (has_offset && offset != 0.0) {
      to->SetOffset(offset);
    }
    if (has_scale && scale != 1.0) {
      to->SetScale(scale);
    }
    if (from->GetUnitType() != nullptr && from->GetUnitType()[0] != '\0') {
      to->SetUnitType(from->GetUnitType());
    }
    if (char** categories = from->GetCategoryNames()) {
      to->SetCategoryNames(categories);
    }
    if (GDALRasterAttributeTable* table = from->GetDefaultRAT()) {
      to->SetDefaultRAT(table);
    }
  }
}

// Whether gdalwarp, creating `output` in `format` itself, would skip the chunks that have no
// source (SKIP_NOSOURCE=YES, set for new GTiff, GPKG and MEM outputs when INIT_DEST agrees with
// the output's nodata; docs/internals.md §10). The pixels do not depend on it; the RPC window
// below does.
bool gdalwarp_skips_nosource(const GDALWarpOptions& options, GDALDataset* output,
                             const char* format) {
  CSLConstList warp_options = options.papszWarpOptions;
  if (const char* value = CSLFetchNameValue(warp_options, "SKIP_NOSOURCE")) {
    return CPLTestBool(value);
  }
  if (CSLFetchNameValue(warp_options, "STREAMABLE_OUTPUT") != nullptr) {
    return false;
  }
  const bool mem = EQUAL(format, "MEM");
  if (!mem && !EQUAL(format, "GTiff") && !EQUAL(format, "GPKG")) {
    return false;
  }
  const int band_count = output->GetRasterCount();
  const char* init_dest = CSLFetchNameValue(warp_options, "INIT_DEST");
  const CPLStringList tokens(
      init_dest == nullptr || EQUAL(init_dest, "NO_DATA") ? nullptr : CSLTokenizeString(init_dest));
  if (!tokens.empty() && tokens.size() != 1 && tokens.size() != band_count) {
    return false;
  }
  for (int i = 0; i < band_count; ++i) {
    int has_nodata = FALSE;
    const double nodata = output->GetRasterBand(i + 1)->GetNoDataValue(&has_nodata);
    // The MEM driver reads unwritten blocks as 0.
    if (mem && has_nodata && nodata != 0.0) {
      return false;
    }
    if (!tokens.empty()) {
      const double init =
          adjust_close_to_float_max(CPLAtofM(tokens[std::min(i, tokens.size() - 1)]));
      if (!((has_nodata && init == nodata) || (!has_nodata && init == 0.0))) {
        return false;
      }
    }
  }
  return true;
}

// gdalwarp's restriction of an RPC warp into a new output (its AdjustOutputExtentForRPC): RPCs
// can find source pixels for points outside the source's footprint, so gdalwarp warps only the
// footprint's bounding box plus 5 pixels, unless RESTRICT_OUTPUT_DATASET_UPDATE=NO. Returns the
// window to warp, empty when the footprint misses the output (docs/internals.md §10).
WarpWindow gdalwarp_window(const GDALWarpOptions& options, GDALDataset* output,
                           bool skip_nosource) {
  WarpWindow window{0, 0, output->GetRasterXSize(), output->GetRasterYSize()};
  GDALDataset* source = GDALDataset::FromHandle(options.hSrcDS);
  if (!skip_nosource || source == nullptr || source->GetMetadata("RPC") == nullptr ||
      !CPLTestBool(CPLGetConfigOption("RESTRICT_OUTPUT_DATASET_UPDATE", "YES")) ||
      options.pfnTransformer == nullptr) {
    return window;
  }
  // gdalwarp measures the footprint with the exact transformer, not the approximation the warp
  // may use: take the GenImgProj transformer out of the serialised one.
  const CPLXMLTreeCloser tree(
      GDALSerializeTransformer(options.pfnTransformer, options.pTransformerArg));
  const CPLXMLNode* exact = tree.get();
  if (exact != nullptr && EQUAL(exact->pszValue, "ApproxTransformer")) {
    const CPLXMLNode* base = CPLGetXMLNode(exact, "BaseTransformer");
    exact = base == nullptr ? nullptr : base->psChild;
    while (exact != nullptr && exact->eType != CXT_Element) {
      exact = exact->psNext;
    }
  }
  if (exact == nullptr || !EQUAL(exact->pszValue, "GenImgProjTransformer") ||
      !rpc_method(exact, source)) {
    return window;
  }
  GDALTransformerFunc transform = nullptr;
  void* transform_arg = nullptr;
  if (GDALDeserializeTransformer(const_cast<CPLXMLNode*>(exact), &transform, &transform_arg) !=
          CE_None ||
      transform_arg == nullptr) {
    throw Error(ErrorKind::k_source,
                "cannot rebuild the RPC transformer of the warp: " + last_gdal_error());
  }
  double geotransform[6];
  double extent[4];
  int pixels = 0;
  int lines = 0;
  const CPLErr suggested =
      GDALSuggestedWarpOutput2(GDALDataset::ToHandle(source), transform, transform_arg,
                               geotransform, &pixels, &lines, extent, 0);
  GDALDestroyTransformer(transform_arg);
  constexpr double k_threshold = static_cast<double>(INT_MAX) / 2;
  if (suggested != CE_None ||
      !(std::fabs(extent[0]) < k_threshold && std::fabs(extent[1]) < k_threshold &&
        std::fabs(extent[2]) < k_threshold && std::fabs(extent[3]) < k_threshold)) {
    return window;
  }
  constexpr int k_padding = 5;
  window.x_off = std::max(0, static_cast<int>(std::floor(extent[0])) - k_padding);
  window.y_off = std::max(0, static_cast<int>(std::floor(extent[1])) - k_padding);
  window.x_size = std::min(output->GetRasterXSize() - window.x_off,
                           static_cast<int>(std::ceil(extent[2])) + k_padding - window.x_off);
  window.y_size = std::min(output->GetRasterYSize() - window.y_off,
                           static_cast<int>(std::ceil(extent[3])) + k_padding - window.y_off);
  CPLDebug(k_debug_category, "RPC source: warping the output window %d,%d,%dx%d", window.x_off,
           window.y_off, window.x_size, window.y_size);
  return window;
}

}  // namespace idem
