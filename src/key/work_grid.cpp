// SPDX-License-Identifier: MIT
// The target grid of a canonical work description (work_grid.hpp).
#include "key/work_grid.hpp"

#include <cstdlib>

#include "base/canonical_json.hpp"
#include "cpl_conv.h"
#include "cpl_string.h"
#include "key/work_key.hpp"

namespace idem {

namespace {

// The CRS text of a canonical "crs" value: "EPSG:n", {"projjson": "..."}, or either wrapped with
// its data axes.
std::optional<std::string> crs_text(const JsonValue& node) {
  if (node.type() == JsonValue::Type::k_string) {
    return node.text();
  }
  if (node.type() != JsonValue::Type::k_object) {
    return std::nullopt;
  }
  if (const JsonValue* projjson = node.find("projjson")) {
    if (projjson->type() == JsonValue::Type::k_string) {
      return projjson->text();
    }
    return projjson->dump();
  }
  if (const JsonValue* inner = node.find("crs")) {
    return crs_text(*inner);
  }
  return std::nullopt;
}

WorkBand work_band(const JsonValue& band) {
  WorkBand out;
  if (const JsonValue* attributes = band.find("attr")) {
    if (const JsonValue* type = attributes->find("dataType")) {
      out.data_type = type->text();
    }
  }
  if (const JsonValue* children = band.find("children")) {
    for (const JsonValue& child : children->items()) {
      const JsonValue* tag = child.find("tag");
      const JsonValue* text = child.find("text");
      if (tag != nullptr && text != nullptr && tag->text() == "NoDataValue") {
        out.nodata = text->text();
      }
    }
  }
  return out;
}

}  // namespace

std::optional<WorkGrid> work_grid(const std::string& work_json) {
  const auto work = JsonValue::parse(work_json);
  if (!work) {
    return std::nullopt;
  }
  const JsonValue* vrt = work->find("vrt");
  if (vrt == nullptr) {
    return std::nullopt;
  }
  WorkGrid grid;
  if (const JsonValue* format = work->find("format")) {
    grid.format = format->text();
  }
  std::vector<std::pair<std::string, std::string>> creation_options;
  if (const JsonValue* options = work->find("creation_options");
      options != nullptr && options->type() == JsonValue::Type::k_object) {
    for (const auto& [name, value] : options->members()) {
      creation_options.emplace_back(
          name, value.type() == JsonValue::Type::k_string ? value.text() : value.dump());
    }
  }
  grid.output_chooses_grid = output_chooses_its_grid(grid.format, creation_options);
  if (const JsonValue* attributes = vrt->find("attr")) {
    if (const JsonValue* x = attributes->find("rasterXSize")) {
      grid.x_size = std::atoi(x->text().c_str());
    }
    if (const JsonValue* y = attributes->find("rasterYSize")) {
      grid.y_size = std::atoi(y->text().c_str());
    }
  }
  if (const JsonValue* children = vrt->find("children")) {
    for (const JsonValue& child : children->items()) {
      const JsonValue* tag = child.find("tag");
      if (tag == nullptr) {
        continue;
      }
      if (tag->text() == "VRTRasterBand") {
        grid.bands.push_back(work_band(child));
      } else if (tag->text() == "GeoTransform") {
        if (const JsonValue* text = child.find("text")) {
          const CPLStringList parts(CSLTokenizeString2(text->text().c_str(), ", ", 0));
          if (parts.size() == 6) {
            std::vector<double> values;
            values.reserve(6);
            for (int i = 0; i < 6; ++i) {
              values.push_back(CPLAtof(parts[i]));
            }
            grid.geotransform = values;
          }
        }
      } else if (tag->text() == "SRS") {
        if (const JsonValue* crs = child.find("crs")) {
          grid.srs = crs_text(*crs);
        }
      }
    }
  }
  if (grid.x_size <= 0 || grid.y_size <= 0) {
    return std::nullopt;
  }
  return grid;
}

}  // namespace idem
