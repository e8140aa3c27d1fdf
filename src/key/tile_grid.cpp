// SPDX-License-Identifier: MIT
// Tiles and footprints of a target grid.
#include "key/tile_grid.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <vector>

#include "base/error.hpp"
#include "cpl_error.h"
#include "ogr_geometry.h"
#include "ogr_spatialref.h"

namespace idem {

namespace {

constexpr double k_web_mercator_half_extent = 20037508.342789244;
constexpr double k_web_mercator_radius = 6378137.0;  // the WGS 84 semi-major axis
constexpr int k_web_mercator_tile_size = 256;
constexpr int k_max_zoom = 30;

bool nearly_equal(double a, double b, double tolerance) {
  return std::fabs(a - b) <= tolerance;
}

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

OGRPolygon* polygon_of(const Ring& ring) {
  auto* linear = new OGRLinearRing();
  for (const auto& [x, y] : ring) {
    linear->addPoint(x, y);
  }
  linear->closeRings();
  auto* polygon = new OGRPolygon();
  polygon->addRingDirectly(linear);
  return polygon;
}

bool grid_is_web_mercator(const TargetGrid& grid) {
  if (grid.web_mercator) {
    return *grid.web_mercator;
  }
  OGRSpatialReference srs;
  return srs.SetFromUserInput(grid.srs_wkt.c_str()) == OGRERR_NONE && is_web_mercator(srs);
}

// EPSG:3857 to longitude and latitude on WGS 84, in place: the inverse of the spherical
// Mercator on the ellipsoid's semi-major axis. Longitudes are brought into [-180, 180] as PROJ
// brings them.
void invert_web_mercator(std::vector<double>& xs, std::vector<double>& ys) {
  constexpr double degrees = 180.0 / M_PI;
  for (size_t i = 0; i < xs.size(); ++i) {
    double lon = xs[i] / k_web_mercator_radius * degrees;
    if (std::fabs(lon) > 180.0) {
      lon -= 360.0 * std::floor((lon + 180.0) / 360.0);
    }
    xs[i] = lon;
    ys[i] = std::atan(std::sinh(ys[i] / k_web_mercator_radius)) * degrees;
  }
}

// The grid's outline in EPSG:4326 (longitude, latitude) as the rings of its polygons (open:
// the first point is not repeated), split at the antimeridian; empty when there is none.
std::vector<Ring> footprint_rings(const TargetGrid& grid) {
  if (!grid.has_geotransform || grid.srs_wkt.empty() || grid.x_size <= 0 || grid.y_size <= 0) {
    return {};
  }
  const double corners[5][2] = {{0, 0},
                                {double(grid.x_size), 0},
                                {double(grid.x_size), double(grid.y_size)},
                                {0, double(grid.y_size)},
                                {0, 0}};
  // An unrotated Web Mercator grid's edges are meridians and parallels: straight in longitude
  // and latitude, so its corners are its whole outline, as long as neighbouring corners are
  // less than 180 degrees apart for the unwrapping below. Other grids' edges are densified.
  const bool web_mercator = grid.web_mercator.value_or(false);
  const double width_degrees =
      std::fabs(grid.x_size * grid.geotransform[1]) / k_web_mercator_radius * (180.0 / M_PI);
  const int points_per_edge = web_mercator && grid.geotransform[2] == 0.0 &&
                                      grid.geotransform[4] == 0.0 && width_degrees < 90.0
                                  ? 1
                                  : k_points_per_edge;
  std::vector<double> xs;
  std::vector<double> ys;
  for (int edge = 0; edge < 4; ++edge) {
    for (int i = 0; i < points_per_edge; ++i) {
      const double t = double(i) / points_per_edge;
      const double px = corners[edge][0] + t * (corners[edge + 1][0] - corners[edge][0]);
      const double py = corners[edge][1] + t * (corners[edge + 1][1] - corners[edge][1]);
      xs.push_back(grid.geotransform[0] + px * grid.geotransform[1] + py * grid.geotransform[2]);
      ys.push_back(grid.geotransform[3] + px * grid.geotransform[4] + py * grid.geotransform[5]);
    }
  }
  std::vector<int> ok(xs.size(), 1);
  if (web_mercator) {
    invert_web_mercator(xs, ys);
  } else {
    OGRSpatialReference source;
    if (source.SetFromUserInput(grid.srs_wkt.c_str()) != OGRERR_NONE) {
      return {};
    }
    OGRSpatialReference wgs84;
    wgs84.importFromEPSG(4326);
    source.SetAxisMappingStrategy(OAMS_TRADITIONAL_GIS_ORDER);
    wgs84.SetAxisMappingStrategy(OAMS_TRADITIONAL_GIS_ORDER);
    std::unique_ptr<OGRCoordinateTransformation> transform;
    {
      CPLErrorHandlerPusher quiet(CPLQuietErrorHandler);
      transform.reset(OGRCreateCoordinateTransformation(&source, &wgs84));
    }
    if (!transform || !transform->Transform(static_cast<int>(xs.size()), xs.data(), ys.data(),
                                            nullptr, ok.data())) {
      return {};
    }
  }
  // Unwrap longitudes into one continuous run: a jump of more than 180 degrees between
  // neighbouring outline points is a crossing of the antimeridian.
  Ring ring;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (!ok[i] || !std::isfinite(xs[i]) || !std::isfinite(ys[i])) {
      return {};
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
  if (max_lon <= 180.0) {
    return {ring};
  }
  std::vector<Ring> parts;
  for (const bool west : {true, false}) {
    Ring part = clip_at_meridian(ring, 180.0, west);
    if (part.size() >= 3) {
      if (!west) {
        for (auto& point : part) {
          point.first -= 360.0;
        }
      }
      parts.push_back(std::move(part));
    }
  }
  return parts;
}

}  // namespace

bool is_web_mercator(const OGRSpatialReference& srs) {
  if (!srs.IsProjected()) {
    return false;
  }
  OGRSpatialReference web_mercator;
  return web_mercator.importFromEPSG(3857) == OGRERR_NONE && srs.IsSame(&web_mercator);
}

TileIndex parse_tile_index(const std::string& text) {
  TileIndex tile;
  char trailing = 0;
  if (std::sscanf(text.c_str(), "%d/%d/%d%c", &tile.z, &tile.x, &tile.y, &trailing) != 3 ||
      tile.z < 0 || tile.z > k_max_zoom || tile.x < 0 || tile.y < 0 || tile.x >= (1 << tile.z) ||
      tile.y >= (1 << tile.z)) {
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
  if (!grid_is_web_mercator(grid)) {
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

std::unique_ptr<OGRMultiPolygon> footprint_geometry(const TargetGrid& grid) {
  const std::vector<Ring> parts = footprint_rings(grid);
  if (parts.empty()) {
    return nullptr;
  }
  auto result = std::make_unique<OGRMultiPolygon>();
  for (const Ring& part : parts) {
    result->addGeometryDirectly(polygon_of(part));
  }
  return result;
}

// Written here rather than by OGR: a tile's claim pays for this, and OGR's first geometry and
// first WKT export in a process cost a few tenths of a millisecond. 15 significant digits, as
// OGR writes them.
std::optional<std::string> footprint_wkt(const TargetGrid& grid) {
  const std::vector<Ring> parts = footprint_rings(grid);
  if (parts.empty()) {
    return std::nullopt;
  }
  std::string text = "MULTIPOLYGON (";
  char number[64];
  for (size_t p = 0; p < parts.size(); ++p) {
    text += p == 0 ? "((" : ",((";
    for (size_t i = 0; i <= parts[p].size(); ++i) {
      const auto& [lon, lat] = parts[p][i % parts[p].size()];  // closed: the first point again
      std::snprintf(number, sizeof(number), "%s%.15g %.15g", i == 0 ? "" : ",", lon, lat);
      text += number;
    }
    text += "))";
  }
  text += ")";
  return text;
}

}  // namespace idem
