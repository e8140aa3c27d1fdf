// SPDX-License-Identifier: MIT
// gdal-idem export OUT.gpkg|OUT.geojson [--namespace N] [--layer L]: the ledger as a vector
// layer through OGR, one feature per row with its tile footprint in EPSG:4326 (from the target
// grid of the work description, else from the output itself) and its state, ready for QGIS.
// Footprints crossing the antimeridian are split into a MultiPolygon at +/-180.
#include <cmath>
#include <cstdio>

#include "base/directory_handle.hpp"
#include "base/error.hpp"
#include "base/gdal_compat.hpp"
#include "base/held_messages.hpp"
#include "base/paths.hpp"
#include "base/random_token.hpp"
#include "cli.hpp"
#include "cli_json.hpp"
#include "cli_ledger.hpp"
#include "cli_progress.hpp"
#include "cpl_error.h"
#include "cpl_string.h"
#include "cpl_vsi.h"
#include "gdal_priv.h"
#include "key/tile_grid.hpp"
#include "ogr_geometry.h"
#include "ogr_spatialref.h"
#include "ogrsf_frmts.h"
#include "stac_export.hpp"
#include "work/atomic_output.hpp"
#include "work/destination_guard.hpp"

namespace idem::cli {

namespace {

constexpr const char* k_layer_name = "idem_ledger";

void set_time(OGRFeature& feature, const char* field, const std::optional<double>& epoch) {
  if (!epoch) {
    return;
  }
  const std::time_t seconds = static_cast<std::time_t>(std::floor(*epoch));
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  feature.SetField(field, utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min,
                   static_cast<float>(utc.tm_sec + (*epoch - std::floor(*epoch))), 100);
}

// The layer `export` writes, with its fields.
OGRLayer* create_ledger_layer(GDALDataset& dataset, OGRSpatialReference& wgs84,
                              const std::string& destination) {
  OGRLayer* layer = dataset.CreateLayer(k_layer_name, &wgs84, wkbMultiPolygon, nullptr);
  if (layer == nullptr) {
    throw UsageError{"cannot create the layer in " + destination + ": " + CPLGetLastErrorMsg()};
  }
  const std::pair<const char*, OGRFieldType> fields[] = {
      {"work_key", OFTString},
      {"namespace", OFTString},
      {"layer", OFTString},
      {"tile_z", OFTInteger},
      {"tile_x", OFTInteger},
      {"tile_y", OFTInteger},
      {"state", OFTString},
      {"output_uri", OFTString},
      {"attempt", OFTInteger64},
      {"worker_host", OFTString},
      {"worker_pid", OFTInteger64},
      {"claimed_at", OFTDateTime},
      {"lease_expires_at", OFTDateTime},
      {"completed_at", OFTDateTime},
      {"superseded_at", OFTDateTime},
      {"output_size", OFTInteger64},
  };
  for (const auto& [name, type] : fields) {
    OGRFieldDefn definition(name, type);
    if (layer->CreateField(&definition) != OGRERR_NONE) {
      throw Error(ErrorKind::k_io, "cannot create the field " + std::string(name) + " in " +
                                       destination + ": " + CPLGetLastErrorMsg());
    }
  }
  return layer;
}

// A ledger row's attributes.
void set_row_fields(OGRFeature& feature, const LedgerRow& row) {
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
}

int export_stac(const std::string& destination, Ledger::RowFilter filter,
                const GlobalOptions& global) {
  if (is_vsi_path(destination)) {
    throw UsageError{"the STAC catalog is written to a local directory, not " + destination +
                     ": export it locally and copy the directory"};
  }
  const std::string directory = absolute_path(destination);
  auto ledger = open_ledger_read_only(global);
  filter.state = RowState::k_completed;
  const StacCounts counts = write_stac_catalog(directory, ledger->rows(filter), global.ledger_dsn);
  if (global.json) {
    std::printf("%s\n",
                json::object({{"catalog", json::str(directory + "/catalog.json")},
                              {"collections", json::integer(counts.collections)},
                              {"items_removed", json::integer(counts.removed)},
                              {"items_unchanged", json::integer(counts.unchanged)},
                              {"items_written", json::integer(counts.written)},
                              {"without_footprint", json::integer(counts.without_footprint)}})
                    .c_str());
  } else if (!global.quiet) {
    std::printf(
        "STAC catalog %s/catalog.json: %lld collection(s); items: %lld written, %lld "
        "unchanged, %lld removed\n",
        directory.c_str(), static_cast<long long>(counts.collections),
        static_cast<long long>(counts.written), static_cast<long long>(counts.unchanged),
        static_cast<long long>(counts.removed));
  }
  return k_exit_ok;
}

}  // namespace

int run_export(const Args& args, const GlobalOptions& global) {
  constexpr const char* k_synopsis =
      "usage: gdal-idem export OUT.gpkg|OUT.geojson [--namespace N] [--layer L]\n"
      "       gdal-idem export --format stac DIR [--namespace N] [--layer L]";
  std::optional<std::string> destination;
  std::optional<std::string> format;
  Ledger::RowFilter filter;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--format" && i + 1 < args.size()) {
      format = CPLString(args[++i]).tolower();
    } else if (args[i] == "--namespace" && i + 1 < args.size()) {
      filter.namespace_name = label_argument("--namespace", args[++i]);
    } else if (args[i] == "--layer" && i + 1 < args.size()) {
      filter.layer = label_argument("--layer", args[++i]);
    } else if (!args[i].empty() && args[i][0] != '-' && !destination) {
      destination = args[i];
    } else {
      throw UsageError{"unknown argument '" + args[i] + "'; " + k_synopsis};
    }
  }
  if (!destination) {
    throw UsageError{k_synopsis};
  }
  if (format && *format == "stac") {
    return export_stac(*destination, filter, global);
  }
  if (format) {  // accepted before and then ignored, it would contradict OUT's extension
    throw UsageError{"--format takes stac, not " + *format +
                     ": a GeoPackage or GeoJSON export takes its format from OUT's extension "
                     "(.gpkg, .geojson); " +
                     k_synopsis};
  }
  // Written whole, through the handle of its directory, and put in place as an output is
  // (AtomicOutput): never over the ledger, a link or a special file, never half written.
  const std::string real = real_destination(*destination);
  std::optional<DirectoryHandle> directory;
  if (!is_vsi_path(real)) {
    directory = open_destination_directory(real);
  }
  DestinationRules rules;
  rules.ledger_dsn = global.ledger_dsn;
  check_destination(real, rules, directory ? &*directory : nullptr);
  const std::string extension = CPLString(CPLGetExtension(destination->c_str())).tolower();
  const char* driver_name = extension == "gpkg"                             ? "GPKG"
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
  auto ledger = open_ledger_read_only(global);
  const std::vector<LedgerRow> rows = ledger->rows(filter);

  AtomicOutput output(real, random_hex(16), std::move(directory));
  CPLErrorReset();
  GDALDatasetUniquePtr dataset(
      driver->Create(output.temp_path().c_str(), 0, 0, 0, GDT_Unknown, nullptr));
  if (!dataset) {
    throw UsageError{"cannot create " + *destination + ": " + CPLGetLastErrorMsg()};
  }
  OGRSpatialReference wgs84;
  wgs84.importFromEPSG(4326);
  wgs84.SetAxisMappingStrategy(OAMS_TRADITIONAL_GIS_ORDER);
  OGRLayer* layer = create_ledger_layer(*dataset, wgs84, *destination);
  Progress progress(!global.quiet);
  dataset->StartTransaction();
  int64_t without_footprint = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const LedgerRow& row = rows[i];
    OGRFeature feature(layer->GetLayerDefn());
    set_row_fields(feature, row);
    std::unique_ptr<OGRMultiPolygon> geometry;
    if (const auto grid = output_grid_of(row)) {
      geometry = footprint_geometry(*grid);
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
  CPLErrorReset();
  dataset.reset();
  if (CPLGetLastErrorType() == CE_Failure) {
    throw UsageError{"cannot write " + *destination + ": " + CPLGetLastErrorMsg()};
  }
  output.commit();
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
