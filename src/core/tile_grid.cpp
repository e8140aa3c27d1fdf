// Tiles and footprints of a target grid.
#include "core/tile_grid.hpp"

#include <cmath>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <vector>

#include "core/error.hpp"
#include "ogr_spatialref.h"

namespace idem {

namespace {

constexpr double k_web_mercator_half_extent = 20037508.342789244;
constexpr int k_web_mercator_tile_size = 256;
constexpr int k_max_zoom = 30;

bool nearly_equal(double a, double b, double tolerance) { return std::fabs(a - b) <= tolerance; }

}  // namespace

TileIndex parse_tile_index(const std::string& text) {
  TileIndex tile;
  char trailing = 0;
  if (std::sscanf(text.c_str(), "%d/%d/%d%c", &tile.z, &tile.x, &tile.y, &trailing) != 3 ||
      tile.z < 0 || tile.z > k_max_zoom || tile.x < 0 || tile.y < 0 ||
      tile.x >= (1 << tile.z) || tile.y >= (1 << tile.z)) {
    throw Error(ErrorKind::k_usage, "TILE=" + text +
                                        " is not a tile index: write it as z/x/y with 0 <= x, y "
                                        "< 2^z (e.g. TILE=12/2200/1343)");
  }
  return tile;
}

std::optional<TileIndex> web_mercator_tile(const TargetGrid& grid) {
  if (!grid.has_geotransform || grid.srs_wkt.empty() || grid.x_size != k_web_mercator_tile_size ||
      grid.y_size != k_web_mercator_tile_size) {
    return std::nullopt;
  }
  const double* gt = grid.geotransform;
  if (gt[2] != 0.0 || gt[4] != 0.0 || !nearly_equal(gt[1], -gt[5], gt[1] * 1e-9)) {
    return std::nullopt;
  }
  OGRSpatialReference srs;
  OGRSpatialReference web_mercator;
  if (srs.importFromWkt(grid.srs_wkt.c_str()) != OGRERR_NONE ||
      web_mercator.importFromEPSG(3857) != OGRERR_NONE || !srs.IsSame(&web_mercator)) {
    return std::nullopt;
  }
  const double world = 2.0 * k_web_mercator_half_extent;
  for (int z = 0; z <= k_max_zoom; ++z) {
    const double tile_span = world / std::ldexp(1.0, z);
    const double resolution = tile_span / k_web_mercator_tile_size;
    if (!nearly_equal(gt[1], resolution, resolution * 1e-6)) {
      continue;
    }
    const double fx = (gt[0] + k_web_mercator_half_extent) / tile_span;
    const double fy = (k_web_mercator_half_extent - gt[3]) / tile_span;
    const double x = std::round(fx);
    const double y = std::round(fy);
    if (!nearly_equal(fx, x, 1e-6) || !nearly_equal(fy, y, 1e-6) || x < 0 || y < 0 ||
        x >= std::ldexp(1.0, z) || y >= std::ldexp(1.0, z)) {
      return std::nullopt;
    }
    return TileIndex{z, static_cast<int>(x), static_cast<int>(y)};
  }
  return std::nullopt;
}

std::optional<std::string> footprint_wkt(const TargetGrid& grid) {
  if (!grid.has_geotransform || grid.srs_wkt.empty() || grid.x_size <= 0 || grid.y_size <= 0) {
    return std::nullopt;
  }
  OGRSpatialReference source;
  OGRSpatialReference wgs84;
  if (source.importFromWkt(grid.srs_wkt.c_str()) != OGRERR_NONE) {
    return std::nullopt;
  }
  wgs84.importFromEPSG(4326);
  source.SetAxisMappingStrategy(OAMS_TRADITIONAL_GIS_ORDER);
  wgs84.SetAxisMappingStrategy(OAMS_TRADITIONAL_GIS_ORDER);
  std::unique_ptr<OGRCoordinateTransformation> transform(
      OGRCreateCoordinateTransformation(&source, &wgs84));
  if (!transform) {
    return std::nullopt;
  }
  // Walk the grid's outline (pixel space, clockwise from the top-left) with densified edges.
  constexpr int k_points_per_edge = 16;
  std::vector<double> xs;
  std::vector<double> ys;
  const double corners[5][2] = {{0, 0},
                                {double(grid.x_size), 0},
                                {double(grid.x_size), double(grid.y_size)},
                                {0, double(grid.y_size)},
                                {0, 0}};
  const double* gt = grid.geotransform;
  for (int edge = 0; edge < 4; ++edge) {
    for (int i = 0; i < k_points_per_edge; ++i) {
      const double t = double(i) / k_points_per_edge;
      const double px = corners[edge][0] + t * (corners[edge + 1][0] - corners[edge][0]);
      const double py = corners[edge][1] + t * (corners[edge + 1][1] - corners[edge][1]);
      xs.push_back(gt[0] + px * gt[1] + py * gt[2]);
      ys.push_back(gt[3] + px * gt[4] + py * gt[5]);
    }
  }
  if (!transform->Transform(static_cast<int>(xs.size()), xs.data(), ys.data())) {
    return std::nullopt;
  }
  std::ostringstream wkt;
  wkt.precision(12);
  wkt << "POLYGON((";
  for (size_t i = 0; i < xs.size(); ++i) {
    wkt << xs[i] << " " << ys[i] << ",";
  }
  wkt << xs[0] << " " << ys[0] << "))";
  return wkt.str();
}

}  // namespace idem
