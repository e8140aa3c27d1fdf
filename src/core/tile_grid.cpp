// Tiles and footprints of a target grid.
#include "core/tile_grid.hpp"

#include <cmath>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <vector>

#include "core/error.hpp"
#include "cpl_error.h"
#include "ogr_geometry.h"
#include "ogr_spatialref.h"

namespace idem {

namespace {

constexpr double k_web_mercator_half_extent = 20037508.342789244;
constexpr int k_web_mercator_tile_size = 256;
constexpr int k_max_zoom = 30;

bool nearly_equal(double a, double b, double tolerance) { return std::fabs(a - b) <= tolerance; }

constexpr int k_points_per_edge = 16;

using Ring = std::vector<std::pair<double, double>>;

// The part of `ring` on one side of the meridian x = `at` (Sutherland-Hodgman against a
// half-plane): keep x <= at when `below`, else x >= at.
Ring clip_at_meridian(const Ring& ring, double at, bool below) {
  Ring out;
  auto inside = [&](const std::pair<double, double>& p) {
    return below ? p.first <= at : p.first >= at;
  };
  for (size_t i = 0; i < ring.size(); ++i) {
    const auto& current = ring[i];
    const auto& previous = ring[(i + ring.size() - 1) % ring.size()];
    const bool current_in = inside(current);
    const bool previous_in = inside(previous);
    if (current_in != previous_in) {
      const double t = (at - previous.first) / (current.first - previous.first);
      out.emplace_back(at, previous.second + t * (current.second - previous.second));
    }
    if (current_in) {
      out.push_back(current);
    }
  }
  return out;
}

OGRPolygon* polygon_of(const Ring& ring, double shift) {
  auto* linear = new OGRLinearRing();
  for (const auto& [x, y] : ring) {
    linear->addPoint(x + shift, y);
  }
  linear->closeRings();
  auto* polygon = new OGRPolygon();
  polygon->addRingDirectly(linear);
  return polygon;
}


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
  if (srs.SetFromUserInput(grid.srs_wkt.c_str()) != OGRERR_NONE ||
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

// The grid's outline in EPSG:4326 (longitude, latitude), split at the antimeridian.
std::unique_ptr<OGRMultiPolygon> footprint_geometry(const TargetGrid& grid) {
  if (!grid.has_geotransform || grid.srs_wkt.empty() || grid.x_size <= 0 || grid.y_size <= 0) {
    return nullptr;
  }
  OGRSpatialReference source;
  if (source.SetFromUserInput(grid.srs_wkt.c_str()) != OGRERR_NONE) {
    return nullptr;
  }
  OGRSpatialReference wgs84;
  wgs84.importFromEPSG(4326);
  source.SetAxisMappingStrategy(OAMS_TRADITIONAL_GIS_ORDER);
  wgs84.SetAxisMappingStrategy(OAMS_TRADITIONAL_GIS_ORDER);
  CPLPushErrorHandler(CPLQuietErrorHandler);
  std::unique_ptr<OGRCoordinateTransformation> transform(
      OGRCreateCoordinateTransformation(&source, &wgs84));
  CPLPopErrorHandler();
  if (!transform) {
    return nullptr;
  }
  const double corners[5][2] = {{0, 0},
                                {double(grid.x_size), 0},
                                {double(grid.x_size), double(grid.y_size)},
                                {0, double(grid.y_size)},
                                {0, 0}};
  std::vector<double> xs;
  std::vector<double> ys;
  for (int edge = 0; edge < 4; ++edge) {
    for (int i = 0; i < k_points_per_edge; ++i) {
      const double t = double(i) / k_points_per_edge;
      const double px = corners[edge][0] + t * (corners[edge + 1][0] - corners[edge][0]);
      const double py = corners[edge][1] + t * (corners[edge + 1][1] - corners[edge][1]);
      xs.push_back(grid.geotransform[0] + px * grid.geotransform[1] + py * grid.geotransform[2]);
      ys.push_back(grid.geotransform[3] + px * grid.geotransform[4] + py * grid.geotransform[5]);
    }
  }
  std::vector<int> ok(xs.size(), 0);
  if (!transform->Transform(static_cast<int>(xs.size()), xs.data(), ys.data(), nullptr,
                            ok.data())) {
    return nullptr;
  }
  // Unwrap longitudes into one continuous run: a jump of more than 180 degrees between
  // neighbouring outline points is a crossing of the antimeridian.
  Ring ring;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (!ok[i] || !std::isfinite(xs[i]) || !std::isfinite(ys[i])) {
      return nullptr;
    }
    double lon = xs[i];
    if (!ring.empty()) {
      while (lon - ring.back().first > 180.0) {
        lon -= 360.0;
      }
      while (ring.back().first - lon > 180.0) {
        lon += 360.0;
      }
    }
    ring.emplace_back(lon, ys[i]);
  }
  double min_lon = ring[0].first;
  double max_lon = ring[0].first;
  for (const auto& point : ring) {
    min_lon = std::min(min_lon, point.first);
    max_lon = std::max(max_lon, point.first);
  }
  // Bring the run's west edge into [-180, 180).
  const double shift = -360.0 * std::floor((min_lon + 180.0) / 360.0);
  for (auto& point : ring) {
    point.first += shift;
  }
  max_lon += shift;
  auto result = std::make_unique<OGRMultiPolygon>();
  if (max_lon <= 180.0) {
    result->addGeometryDirectly(polygon_of(ring, 0));
    return result;
  }
  const Ring west = clip_at_meridian(ring, 180.0, true);
  const Ring east = clip_at_meridian(ring, 180.0, false);
  if (west.size() >= 3) {
    result->addGeometryDirectly(polygon_of(west, 0));
  }
  if (east.size() >= 3) {
    result->addGeometryDirectly(polygon_of(east, -360.0));
  }
  return result;
}

std::optional<std::string> footprint_wkt(const TargetGrid& grid) {
  const std::unique_ptr<OGRMultiPolygon> geometry = footprint_geometry(grid);
  if (!geometry || geometry->IsEmpty()) {
    return std::nullopt;
  }
  char* wkt = nullptr;
  if (geometry->exportToWkt(&wkt) != OGRERR_NONE || wkt == nullptr) {
    CPLFree(wkt);
    return std::nullopt;
  }
  std::string text = wkt;
  CPLFree(wkt);
  return text;
}

}  // namespace idem
