// Tiles and footprints of a target grid: which WebMercatorQuad tile a grid is exactly, and its
// outline in EPSG:4326 for the ledger's footprint column.
#pragma once

#include <optional>
#include <string>

#include "core/work_key.hpp"
#include "ledger/ledger.hpp"

namespace idem {

// Parse a TILE creation option "z/x/y"; throws idem::Error(k_usage) on anything else.
TileIndex parse_tile_index(const std::string& text);

// The WebMercatorQuad tile (OGC tile matrix set: EPSG:3857, 256x256 tiles) that `grid` is
// exactly, if it is one.
std::optional<TileIndex> web_mercator_tile(const TargetGrid& grid);

// The grid's outline as a WKT POLYGON in EPSG:4326 (longitude, latitude), edges densified;
// nullopt when the grid has no CRS or geotransform or cannot be transformed.
std::optional<std::string> footprint_wkt(const TargetGrid& grid);

}  // namespace idem
