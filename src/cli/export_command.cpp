// gdal-idem export OUT.gpkg|OUT.geojson [--namespace N] [--layer L]: the ledger as a vector
// layer through OGR, one feature per row with its tile footprint in EPSG:4326 (from the target
// grid of the work description, else from the output itself) and its state, ready for QGIS.
// Footprints crossing the antimeridian are split into a MultiPolygon at +/-180.
#include <cmath>
#include <cstdio>

#include "cli.hpp"
#include "cli_util.hpp"
#include "cpl_error.h"
#include "cpl_string.h"
#include "cpl_vsi.h"
#include "gdal_priv.h"
#include "ogr_geometry.h"
#include "ogr_spatialref.h"
#include "ogrsf_frmts.h"

namespace idem::cli {

namespace {

constexpr int k_points_per_edge = 16;
constexpr const char* k_layer_name = "idem_ledger";

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

struct Grid {
  int x_size = 0;
  int y_size = 0;
  double gt[6] = {0, 1, 0, 0, 0, 1};
  OGRSpatialReference srs;
};

std::optional<Grid> grid_of(const LedgerRow& row) {
  Grid grid;
  if (const auto work = work_grid(row.work_json); work && work->geotransform && work->srs) {
    grid.x_size = work->x_size;
    grid.y_size = work->y_size;
    for (int i = 0; i < 6; ++i) {
      grid.gt[i] = (*work->geotransform)[i];
    }
    if (grid.srs.SetFromUserInput(work->srs->c_str()) == OGRERR_NONE) {
      return grid;
    }
  }
  // Not recorded (e.g. a plain copy): the output's own grid, when it is there.
  CPLPushErrorHandler(CPLQuietErrorHandler);
  GDALDatasetUniquePtr dataset(
      GDALDataset::Open(row.output_uri.c_str(), GDAL_OF_RASTER | GDAL_OF_READONLY));
  CPLPopErrorHandler();
  if (!dataset || dataset->GetGeoTransform(grid.gt) != CE_None ||
      dataset->GetSpatialRef() == nullptr) {
    return std::nullopt;
  }
  grid.x_size = dataset->GetRasterXSize();
  grid.y_size = dataset->GetRasterYSize();
  grid.srs = *dataset->GetSpatialRef();
  return grid;
}

// The grid's outline in EPSG:4326 (longitude, latitude), split at the antimeridian.
std::unique_ptr<OGRMultiPolygon> footprint(const Grid& grid) {
  OGRSpatialReference source = grid.srs;
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
      xs.push_back(grid.gt[0] + px * grid.gt[1] + py * grid.gt[2]);
      ys.push_back(grid.gt[3] + px * grid.gt[4] + py * grid.gt[5]);
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

void set_time(OGRFeature& feature, const char* field, const std::optional<double>& epoch) {
  if (!epoch) {
    return;
  }
  const std::time_t seconds = static_cast<std::time_t>(std::floor(*epoch));
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  feature.SetField(field, utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday, utc.tm_hour,
                   utc.tm_min, static_cast<float>(utc.tm_sec + (*epoch - std::floor(*epoch))),
                   100);
}

}  // namespace

int run_export(const Args& args, const GlobalOptions& global) {
  constexpr const char* k_synopsis =
      "usage: gdal-idem export OUT.gpkg|OUT.geojson [--namespace N] [--layer L]";
  std::optional<std::string> destination;
  Ledger::RowFilter filter;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--namespace" && i + 1 < args.size()) {
      filter.namespace_name = args[++i];
    } else if (args[i] == "--layer" && i + 1 < args.size()) {
      filter.layer = args[++i];
    } else if (!args[i].empty() && args[i][0] != '-' && !destination) {
      destination = args[i];
    } else {
      throw UsageError{"unknown argument '" + args[i] + "'; " + k_synopsis};
    }
  }
  if (!destination) {
    throw UsageError{k_synopsis};
  }
  const std::string extension = CPLString(CPLGetExtension(destination->c_str())).tolower();
  const char* driver_name = extension == "gpkg"                          ? "GPKG"
                            : extension == "geojson" || extension == "json" ? "GeoJSON"
                                                                           : nullptr;
  if (driver_name == nullptr) {
    throw UsageError{"cannot tell the format of '" + *destination +
                     "': name it .gpkg (GeoPackage) or .geojson (GeoJSON)"};
  }
  GDALDriver* driver = GetGDALDriverManager()->GetDriverByName(driver_name);
  if (driver == nullptr) {
    throw UsageError{std::string("this GDAL has no ") + driver_name + " driver"};
  }
  auto ledger = open_ledger(global);
  const std::vector<LedgerRow> rows = ledger->rows(filter);

  VSIStatBufL existing;
  if (VSIStatL(destination->c_str(), &existing) == 0) {
    CPLPushErrorHandler(CPLQuietErrorHandler);
    if (driver->Delete(destination->c_str()) != CE_None) {
      VSIUnlink(destination->c_str());
    }
    CPLPopErrorHandler();
  }
  CPLErrorReset();
  GDALDatasetUniquePtr dataset(
      driver->Create(destination->c_str(), 0, 0, 0, GDT_Unknown, nullptr));
  if (!dataset) {
    throw UsageError{"cannot create " + *destination + ": " + CPLGetLastErrorMsg()};
  }
  OGRSpatialReference wgs84;
  wgs84.importFromEPSG(4326);
  wgs84.SetAxisMappingStrategy(OAMS_TRADITIONAL_GIS_ORDER);
  OGRLayer* layer = dataset->CreateLayer(k_layer_name, &wgs84, wkbMultiPolygon, nullptr);
  if (layer == nullptr) {
    throw UsageError{"cannot create the layer in " + *destination + ": " + CPLGetLastErrorMsg()};
  }
  const std::pair<const char*, OGRFieldType> fields[] = {
      {"work_key", OFTString},       {"namespace", OFTString},
      {"layer", OFTString},          {"tile_z", OFTInteger},
      {"tile_x", OFTInteger},        {"tile_y", OFTInteger},
      {"state", OFTString},          {"output_uri", OFTString},
      {"attempt", OFTInteger64},     {"worker_host", OFTString},
      {"worker_pid", OFTInteger64},  {"claimed_at", OFTDateTime},
      {"lease_expires_at", OFTDateTime}, {"completed_at", OFTDateTime},
      {"superseded_at", OFTDateTime}, {"output_size", OFTInteger64},
  };
  for (const auto& [name, type] : fields) {
    OGRFieldDefn definition(name, type);
    layer->CreateField(&definition);
  }
  Progress progress(!global.quiet);
  dataset->StartTransaction();
  int64_t without_footprint = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const LedgerRow& row = rows[i];
    OGRFeature feature(layer->GetLayerDefn());
    feature.SetField("work_key", row.work_key.c_str());
    feature.SetField("namespace", row.namespace_name.c_str());
    if (row.layer) {
      feature.SetField("layer", row.layer->c_str());
    }
    if (row.tile) {
      feature.SetField("tile_z", row.tile->z);
      feature.SetField("tile_x", row.tile->x);
      feature.SetField("tile_y", row.tile->y);
    }
    feature.SetField("state", row_state_name(row).c_str());
    feature.SetField("output_uri", row.output_uri.c_str());
    feature.SetField("attempt", static_cast<GIntBig>(row.attempt));
    feature.SetField("worker_host", row.worker_host.c_str());
    feature.SetField("worker_pid", static_cast<GIntBig>(row.worker_pid));
    set_time(feature, "claimed_at", row.claimed_at);
    set_time(feature, "lease_expires_at", row.lease_expires_at);
    set_time(feature, "completed_at", row.completed_at);
    set_time(feature, "superseded_at", row.superseded_at);
    if (row.fingerprint) {
      feature.SetField("output_size", static_cast<GIntBig>(row.fingerprint->size));
    }
    std::unique_ptr<OGRMultiPolygon> geometry;
    if (const auto grid = grid_of(row)) {
      geometry = footprint(*grid);
    }
    if (geometry) {
      geometry->assignSpatialReference(&wgs84);
      feature.SetGeometryDirectly(geometry.release());
    } else {
      ++without_footprint;
    }
    if (layer->CreateFeature(&feature) != OGRERR_NONE) {
      throw UsageError{"cannot write to " + *destination + ": " + CPLGetLastErrorMsg()};
    }
    progress.update(i + 1, rows.size());
  }
  dataset->CommitTransaction();
  dataset.reset();
  progress.finish();
  if (global.json) {
    std::printf("%s\n",
                json::object({{"driver", json::str(driver_name)},
                              {"features", json::integer(static_cast<int64_t>(rows.size()))},
                              {"layer", json::str(k_layer_name)},
                              {"output", json::str(*destination)},
                              {"without_footprint", json::integer(without_footprint)}})
                    .c_str());
  } else {
    std::printf("wrote %zu feature(s) to %s (layer %s, EPSG:4326)", rows.size(),
                destination->c_str(), k_layer_name);
    if (without_footprint > 0) {
      std::printf("; %lld without a footprint (no target grid recorded)",
                  static_cast<long long>(without_footprint));
    }
    std::printf("\n");
  }
  return k_exit_ok;
}

}  // namespace idem::cli
