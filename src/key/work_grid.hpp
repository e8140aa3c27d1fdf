// SPDX-License-Identifier: MIT
// The target grid a canonical work description records (its VRT): what `verify`, `export` and the
// STAC export read of a completion without opening its output.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace idem {

// A band of the recorded VRT: GDAL's data type name and its NoDataValue text, when it has one.
struct WorkBand {
  std::string data_type;
  std::optional<std::string> nodata;
};
// The target grid recorded in a canonical work description (its VRT: size, geotransform, SRS,
// bands) and the output's format. Unset fields stay empty.
struct WorkGrid {
  std::string format;  // the output's driver (FORMAT)
  // The output's driver lays out its own grid (output_chooses_its_grid): the size of an output
  // of this work is not the grid's.
  bool output_chooses_grid = false;
  int x_size = 0;
  int y_size = 0;
  std::vector<WorkBand> bands;
  std::optional<std::vector<double>> geotransform;
  std::optional<std::string> srs;  // "EPSG:3857" or a PROJJSON text, as SetFromUserInput takes
};
std::optional<WorkGrid> work_grid(const std::string& work_json);

}  // namespace idem
