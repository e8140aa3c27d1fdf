// SPDX-License-Identifier: MIT
// Tiles and footprints of a target grid: which WebMercatorQuad tile a grid is exactly, and its
// outline in EPSG:4326 for the ledger's footprint column.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "base/tile_index.hpp"
#include "key/work_key.hpp"
#include "ogr_geometry.h"
#include "ogr_spatialref.h"

namespace idem {

// Parse a TILE creation option "z/x/y"; throws idem::Error(k_usage) on anything else.
TileIndex parse_tile_index(const std::string& text);

// Whether `srs` is EPSG:3857 (WGS 84 / Pseudo-Mercator), however it is spelled.
bool is_web_mercator(const OGRSpatialReference& srs);

// The WebMercatorQuad tile (OGC tile matrix set: EPSG:3857, 256x256 tiles) that `grid` is
// exactly, if it is one.
std::optional<TileIndex> web_mercator_tile(const TargetGrid& grid);

// The grid's outline in EPSG:4326 (longitude, latitude), edges densified, split into two
// polygons where it crosses the antimeridian; null when the grid has no CRS or geotransform or
// cannot be transformed. `srs_wkt` may be any definition OGR accepts (WKT, EPSG:n, PROJJSON).
// A Web Mercator grid (grid.web_mercator) is inverted with the projection's closed formulas,
// which is what PROJ computes for it, without building a transformation.
std::unique_ptr<OGRMultiPolygon> footprint_geometry(const TargetGrid& grid);
// The same as WKT (a MULTIPOLYGON), for the ledger's footprint column.
std::optional<std::string> footprint_wkt(const TargetGrid& grid);

}  // namespace idem
