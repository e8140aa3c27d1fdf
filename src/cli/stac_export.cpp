// SPDX-License-Identifier: MIT
// The ledger as a static STAC catalog (stac_export.hpp). Follows the STAC 1.1.0 specification
// (catalog, collection, item) and its projection (v2.0.0), file (v2.1.0) and processing (v1.2.0)
// extensions.
#include "stac_export.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>

#include "base/canonical_json.hpp"
#include "base/directory_handle.hpp"
#include "base/error.hpp"
#include "base/gdal_compat.hpp"
#include "base/held_messages.hpp"
#include "base/paths.hpp"
#include "base/safe_delete.hpp"
#include "base/sha256.hpp"
#include "base/version.hpp"
#include "base/write_whole.hpp"
#include "cli_json.hpp"
#include "cpl_conv.h"
#include "cpl_string.h"
#include "gdal_priv.h"
#include "key/tile_grid.hpp"
#include "key/work_grid.hpp"
#include "ogr_geometry.h"
#include "ogr_spatialref.h"
#include "work/destination_guard.hpp"
#include "work/output_check.hpp"

namespace idem::cli {

namespace {

constexpr const char* k_stac_version = "1.1.0";
constexpr const char* k_json_type = "application/json";
constexpr const char* k_geojson_type = "application/geo+json";

std::string extensions_json() {
  return json::strings({"https://stac-extensions.github.io/projection/v2.0.0/schema.json",
                        "https://stac-extensions.github.io/file/v2.1.0/schema.json",
                        "https://stac-extensions.github.io/processing/v1.2.0/schema.json"});
}

std::string link(const char* rel, const std::string& href, const char* type) {
  return json::object(
      {{"rel", json::str(rel)}, {"href", json::str(href)}, {"type", json::str(type)}});
}

// A name STAC ids and file names can carry: letters, digits, '.', '_' and '-'.
std::string id_part(const std::string& text) {
  std::string id;
  for (const unsigned char c : text) {
    id += (std::isalnum(c) != 0 || c == '.' || c == '_' || c == '-') ? static_cast<char>(c) : '_';
  }
  return id.empty() || id[0] == '.' ? "_" + id : id;
}

constexpr size_t k_key_length = 64;
bool is_key_file_name(const std::string& name) {
  return name.size() == k_key_length + 5 && name.compare(k_key_length, 5, ".json") == 0 &&
         std::all_of(name.begin(), name.begin() + k_key_length,
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// The temporary file of a file an interrupted export was writing: write_file_atomically's
// ".idem-tmp-<token>.<name>", or an earlier release's "<key>.json.idem-tmp-XXXXXX".
bool is_temp_name(const std::string& name) {
  const size_t item = k_key_length + 5;
  const size_t prefix = std::strlen(k_temp_prefix);
  return name.rfind(k_temp_prefix, 0) == 0 ||
         (name.size() == item + prefix + 6 && is_key_file_name(name.substr(0, item)) &&
          name.compare(item, prefix, k_temp_prefix) == 0);
}

std::string media_type(const std::string& path) {
  const std::string extension = CPLString(CPLGetExtension(path.c_str())).tolower();
  static const std::map<std::string, std::string> k_types = {
      {"tif", "image/tiff; application=geotiff"},
      {"tiff", "image/tiff; application=geotiff"},
      {"png", "image/png"},
      {"jpg", "image/jpeg"},
      {"jpeg", "image/jpeg"},
      {"webp", "image/webp"},
      {"jp2", "image/jp2"},
      {"vrt", "application/xml"},
      {"nc", "application/netcdf"},
      {"gpkg", "application/geopackage+sqlite3"}};
  const auto found = k_types.find(extension);
  return found != k_types.end() ? found->second : "application/octet-stream";
}

// Where an item (in DIR/<collection>/items/) finds its output: a path relative to it under DIR,
// s3:// or gs:// for those stores, else the path GDAL opens.
std::string asset_href(const std::string& directory, const std::string& output) {
  if (output.rfind(directory + "/", 0) == 0) {
    return "../../" + output.substr(directory.size() + 1);
  }
  if (output.rfind("/vsis3/", 0) == 0) {
    return "s3://" + output.substr(7);
  }
  if (output.rfind("/vsigs/", 0) == 0) {
    return "gs://" + output.substr(7);
  }
  return output;
}

struct Box {
  double west = 0, south = 0, east = 0, north = 0;
};

// The bounding box of a footprint: west > east when its two parts meet at the antimeridian.
Box box_of(const OGRMultiPolygon& footprint) {
  OGREnvelope all;
  footprint.getEnvelope(&all);
  Box box{all.MinX, all.MinY, all.MaxX, all.MaxY};
  if (footprint.getNumGeometries() == 2) {
    OGREnvelope a;
    OGREnvelope b;
    footprint.getGeometryRef(0)->getEnvelope(&a);
    footprint.getGeometryRef(1)->getEnvelope(&b);
    if (a.MinX > b.MinX) {
      std::swap(a, b);
    }
    if (a.MinX <= -180 && b.MaxX >= 180) {  // a: east of the line, b: west of it
      box.west = b.MinX;
      box.east = a.MaxX;
    }
  }
  return box;
}

// A longitude in 0..360.
double east_of_greenwich(double longitude) {
  const double wrapped = std::fmod(longitude, 360.0);
  return wrapped < 0 ? wrapped + 360.0 : wrapped;
}

// The extent of `boxes` (each west > east when it crosses the antimeridian), joined as the Python
// package's Dagster footprint joins them (python/gdal_idem/dagster.py, footprint): when a box
// crosses, on longitudes 0..360, then brought back to -180..180, west > east when the joined
// extent crosses too; the whole band of latitudes when it goes all the way round.
std::optional<Box> joined_extent(const std::vector<Box>& boxes) {
  if (boxes.empty()) {
    return std::nullopt;
  }
  Box joined = boxes.front();
  bool crossing = false;
  for (const Box& box : boxes) {
    joined.south = std::min(joined.south, box.south);
    joined.north = std::max(joined.north, box.north);
    joined.west = std::min(joined.west, box.west);
    joined.east = std::max(joined.east, box.east);
    crossing = crossing || box.west > box.east;
  }
  if (!crossing) {
    return joined;
  }
  double west = 360;
  double east = 0;
  for (const Box& box : boxes) {
    const double box_west = east_of_greenwich(box.west);
    double box_east = east_of_greenwich(box.east);
    box_east += box_east < box_west ? 360 : 0;
    west = std::min(west, box_west);
    east = std::max(east, box_east);
  }
  if (east - west >= 360) {
    joined.west = -180;
    joined.east = 180;
    return joined;
  }
  if (west >= 180) {  // all of it west of the antimeridian, in -180..180 terms
    west -= 360;
    east -= 360;
  }
  joined.west = west;
  joined.east = east <= 180 ? east : east - 360;
  return joined;
}

std::string box_json(const Box& box) {
  return json::array(
      {json::real(box.west), json::real(box.south), json::real(box.east), json::real(box.north)});
}

std::string geometry_json(const OGRMultiPolygon& footprint) {
  const OGRGeometry& geometry = footprint.getNumGeometries() == 1
                                    ? *footprint.getGeometryRef(0)
                                    : static_cast<const OGRGeometry&>(footprint);
  char* text = geometry.exportToJson();
  std::string out = text != nullptr ? text : "null";
  CPLFree(text);
  return out;
}

// proj:code (AUTHORITY:CODE) when the CRS has one, else proj:wkt2.
void add_projection(const TargetGrid& grid, std::map<std::string, std::string>& properties) {
  OGRSpatialReference srs;
  if (grid.srs_wkt.empty() || srs.SetFromUserInput(grid.srs_wkt.c_str()) != OGRERR_NONE) {
    return;
  }
  const char* authority = srs.GetAuthorityName(nullptr);
  const char* code = srs.GetAuthorityCode(nullptr);
  if (authority == nullptr || code == nullptr) {
    srs.AutoIdentifyEPSG();
    authority = srs.GetAuthorityName(nullptr);
    code = srs.GetAuthorityCode(nullptr);
  }
  if (authority != nullptr && code != nullptr) {
    properties["proj:code"] = json::str(std::string(authority) + ":" + code);
    return;
  }
  char* wkt = nullptr;
  const char* const options[] = {"FORMAT=WKT2_2019", nullptr};
  if (srs.exportToWkt(&wkt, options) == OGRERR_NONE && wkt != nullptr) {
    properties["proj:code"] = json::null();
    properties["proj:wkt2"] = json::str(wkt);
  }
  CPLFree(wkt);
}

// STAC's name of a GDAL data type (the common metadata's data_type); empty when STAC has none.
std::string stac_data_type(const std::string& gdal_name) {
  static const std::map<std::string, std::string> k_names = {
      {"Byte", "uint8"},      {"Int8", "int8"},         {"UInt16", "uint16"},
      {"Int16", "int16"},     {"UInt32", "uint32"},     {"Int32", "int32"},
      {"UInt64", "uint64"},   {"Int64", "int64"},       {"Float16", "float16"},
      {"Float32", "float32"}, {"Float64", "float64"},   {"CInt16", "cint16"},
      {"CInt32", "cint32"},   {"CFloat32", "cfloat32"}, {"CFloat64", "cfloat64"}};
  const auto found = k_names.find(gdal_name);
  return found != k_names.end() ? found->second : std::string();
}

// A nodata value as STAC writes it: a number, or "nan", "inf", "-inf".
std::string nodata_json(double value) {
  if (std::isnan(value)) {
    return json::str("nan");
  }
  if (std::isinf(value)) {
    return json::str(value > 0 ? "inf" : "-inf");
  }
  return json::real(value);
}

// One of an asset's bands (STAC 1.1 common metadata, where STAC 1.0's raster:bands were): its
// data type and nodata value; nullopt when STAC has no name for the type.
std::optional<std::string> band_json(const std::string& gdal_type, bool has_nodata, double nodata) {
  const std::string data_type = stac_data_type(gdal_type);
  if (data_type.empty()) {
    return std::nullopt;
  }
  std::map<std::string, std::string> members = {{"data_type", json::str(data_type)}};
  if (has_nodata) {
    members["nodata"] = nodata_json(nodata);
  }
  return json::object(members);
}

// The bands of the recorded VRT, known only when the output's format creates their data type
// (a driver that cannot, such as PNG for Float32, converts it): then the output holds what the
// work asked for.
std::optional<std::string> recorded_bands_json(const WorkGrid& work) {
  GDALDriver* driver = GetGDALDriverManager()->GetDriverByName(work.format.c_str());
  const char* creatable =
      driver != nullptr ? driver->GetMetadataItem(GDAL_DMD_CREATIONDATATYPES) : nullptr;
  if (work.bands.empty() || creatable == nullptr) {
    return std::nullopt;
  }
  const CPLStringList types(CSLTokenizeString2(creatable, " ", 0));
  std::vector<std::string> items;
  for (const WorkBand& band : work.bands) {
    if (types.FindString(band.data_type.c_str()) < 0) {
      return std::nullopt;
    }
    const std::optional<std::string> item = band_json(
        band.data_type, band.nodata.has_value(), band.nodata ? CPLAtof(band.nodata->c_str()) : 0);
    if (!item) {
      return std::nullopt;
    }
    items.push_back(*item);
  }
  return json::array(items);
}

// The bands of an opened output.
std::optional<std::string> dataset_bands_json(GDALDataset& dataset) {
  std::vector<std::string> items;
  for (int i = 1; i <= dataset.GetRasterCount(); ++i) {
    GDALRasterBand* band = dataset.GetRasterBand(i);
    int has_nodata = FALSE;
    const double nodata = band->GetNoDataValue(&has_nodata);
    const std::optional<std::string> item =
        band_json(GDALGetDataTypeName(band->GetRasterDataType()), has_nodata != FALSE, nodata);
    if (!item) {
      return std::nullopt;
    }
    items.push_back(*item);
  }
  return items.empty() ? std::nullopt : std::optional<std::string>(json::array(items));
}

// What an item says of its output's grid and bands: what the work recorded, else what the
// output itself holds (opened: a plain copy's work records no grid).
struct OutputShape {
  std::optional<TargetGrid> grid;
  std::optional<std::string> bands;  // a JSON array; nullopt when not known
};

OutputShape output_shape_of(const LedgerRow& row) {
  OutputShape shape;
  TargetGrid grid;
  grid.has_geotransform = true;
  // The work's grid, read from its row; the output's own for a format that lays out its own grid.
  if (const auto work = work_grid(row.work_json);
      work && work->geotransform && work->srs && !work->output_chooses_grid) {
    grid.x_size = work->x_size;
    grid.y_size = work->y_size;
    for (int i = 0; i < 6; ++i) {
      grid.geotransform[i] = (*work->geotransform)[i];
    }
    grid.srs_wkt = *work->srs;
    shape.grid = grid;
    shape.bands = recorded_bands_json(*work);
    return shape;
  }
  GDALDatasetUniquePtr dataset;
  {
    // Looked at before it is opened: a FIFO planted beside an output is never opened.
    CPLErrorHandlerPusher quiet(CPLQuietErrorHandler);
    dataset = open_output_for_check(row.output_uri, nullptr);
  }
  if (!dataset) {
    return shape;
  }
  shape.bands = dataset_bands_json(*dataset);
  if (compat::get_geotransform(dataset.get(), grid.geotransform) != CE_None ||
      dataset->GetSpatialRef() == nullptr) {
    return shape;
  }
  grid.x_size = dataset->GetRasterXSize();
  grid.y_size = dataset->GetRasterYSize();
  char* wkt = nullptr;
  dataset->GetSpatialRef()->exportToWkt(&wkt);
  grid.srs_wkt = wkt != nullptr ? wkt : "";
  CPLFree(wkt);
  shape.grid = grid;
  return shape;
}

struct Item {
  std::string id;
  std::string json;
  std::optional<Box> box;
  std::optional<double> completed_at;
};

Item make_item(const std::string& directory, const std::string& collection, const LedgerRow& row,
               int64_t& without_footprint) {
  Item item;
  item.id = row.work_key;
  item.completed_at = row.completed_at;
  std::map<std::string, std::string> properties = {
      {"datetime", json::time(row.completed_at)},
      {"created", json::time(row.completed_at)},
      {"updated", json::time(row.completed_at)},
      {"idem:key", json::str(row.work_key)},
      {"idem:namespace", json::str(row.namespace_name)},
      {"idem:attempt", json::integer(row.attempt)},
      {"processing:software", json::object({{"gdal-idem", json::str(idem_version())}})}};
  if (row.layer) {
    properties["idem:layer"] = json::str(*row.layer);
  }
  if (row.tile) {
    properties["idem:tile"] =
        json::str(std::to_string(row.tile->z) + "/" + std::to_string(row.tile->x) + "/" +
                  std::to_string(row.tile->y));
  }
  std::string geometry = "null";
  const OutputShape shape = output_shape_of(row);
  const std::optional<TargetGrid>& grid = shape.grid;
  if (grid) {
    properties["proj:shape"] =
        json::array({json::integer(grid->y_size), json::integer(grid->x_size)});
    const double* gt = grid->geotransform;
    properties["proj:transform"] =
        json::array({json::real(gt[1]), json::real(gt[2]), json::real(gt[0]), json::real(gt[4]),
                     json::real(gt[5]), json::real(gt[3])});
    add_projection(*grid, properties);
    if (const std::unique_ptr<OGRMultiPolygon> footprint = footprint_geometry(*grid)) {
      geometry = geometry_json(*footprint);
      item.box = box_of(*footprint);
    }
  }
  if (!item.box) {
    ++without_footprint;
  }
  std::map<std::string, std::string> asset = {
      {"href", json::str(asset_href(directory, row.output_uri))},
      {"type", json::str(media_type(row.output_uri))},
      {"roles", json::strings({"data"})}};
  if (row.fingerprint && row.fingerprint->size >= 0) {
    asset["file:size"] = json::integer(row.fingerprint->size);
  }
  if (shape.bands) {
    asset["bands"] = *shape.bands;
  }
  if (row.fingerprint && row.fingerprint->sha256) {
    asset["file:checksum"] = json::str("1220" + *row.fingerprint->sha256);  // SHA2-256 multihash
  }
  std::map<std::string, std::string> members = {
      {"type", json::str("Feature")},
      {"stac_version", json::str(k_stac_version)},
      {"stac_extensions", extensions_json()},
      {"id", json::str(item.id)},
      {"collection", json::str(collection)},
      {"geometry", geometry},
      {"properties", json::object(properties)},
      {"assets", json::object({{"data", json::object(asset)}})},
      {"links", json::array({link("root", "../../catalog.json", k_json_type),
                             link("parent", "../collection.json", k_json_type),
                             link("collection", "../collection.json", k_json_type)})}};
  if (item.box) {
    members["bbox"] = box_json(*item.box);
  }
  item.json = json::object(members) + "\n";
  return item;
}

// ---------------------------------------------------------------------------------------------
// Files: each written through the destination guard (never the ledger's, never over a link),
// only when it changes, whole (write_file_atomically); every directory held by its handle.

// The directory `name` in `parent`, made when missing; never a link (not followed) or a file.
DirectoryHandle catalog_directory(const DirectoryHandle& parent, const std::string& name) {
  if (::mkdirat(parent.fd(), name.c_str(), 0755) != 0 && errno != EEXIST) {
    throw Error(ErrorKind::k_io, "cannot make the catalog directory " + parent.name_path(name) +
                                     ": " + std::strerror(errno));
  }
  std::optional<DirectoryHandle> directory = parent.child(name);
  if (!directory) {
    throw Error(ErrorKind::k_io, "cannot make the catalog directory " + parent.name_path(name) +
                                     ": it exists and is not a directory (a link is not "
                                     "followed)");
  }
  return std::move(*directory);
}

// True when written, false when the file already held `text`.
bool write_if_changed(const DirectoryHandle& directory, const std::string& name,
                      const std::string& text, const std::string& ledger_dsn) {
  DestinationRules rules;
  rules.ledger_dsn = ledger_dsn;
  check_destination(directory.name_path(name), rules, &directory);
  return write_file_atomically(directory, name, text, true) == WriteOutcome::k_written;
}

// Removes the regular file `name` in `directory`, as it is now (safe_delete).
bool remove_regular_file(const DirectoryHandle& directory, const std::string& name) {
  const std::optional<struct stat> info = directory.look(name);
  return info && S_ISREG(info->st_mode) &&
         delete_known_file_at(directory, name,
                              KnownFile{directory.name_path(name), std::nullopt, std::nullopt,
                                        info->st_dev, info->st_ino}) == DeleteOutcome::k_deleted;
}

// Removes the item files (<key>.json, regular files) of `items` not in `keep`, and the
// temporary files an interrupted export left there (not counted).
int64_t remove_stale_items(const DirectoryHandle& items, const std::set<std::string>& keep) {
  int64_t removed = 0;
  for (const std::string& name : items.entries().value_or(std::vector<std::string>())) {
    if (is_temp_name(name)) {
      remove_regular_file(items, name);
    } else if (is_key_file_name(name) && keep.count(name) == 0 &&
               remove_regular_file(items, name)) {
      ++removed;
    }
  }
  return removed;
}

// Whether `text` is a collection an export wrote: a JSON object with an "idem:namespace".
bool is_idem_collection(const std::optional<std::string>& text) {
  const std::optional<JsonValue> parsed = text ? JsonValue::parse(*text) : std::nullopt;
  return parsed && parsed->is_object() && parsed->find("idem:namespace") != nullptr;
}

// Collections of an earlier export that have no completed output left: their items go, then
// their collection file and their directories when empty (only a collection an export wrote).
int64_t remove_stale_collections(const DirectoryHandle& catalog,
                                 const std::set<std::string>& current) {
  int64_t removed = 0;
  for (const std::string& name : catalog.entries().value_or(std::vector<std::string>())) {
    if (current.count(name) != 0) {
      continue;
    }
    const std::optional<DirectoryHandle> collection = catalog.child(name);  // never a link
    if (!collection || !is_idem_collection(read_regular_file_at(*collection, "collection.json"))) {
      continue;
    }
    if (const std::optional<DirectoryHandle> items = collection->child("items")) {
      removed += remove_stale_items(*items, {});
    }
    remove_regular_file(*collection, "collection.json");
    remove_empty_directory_at(*collection, "items");  // only when empty
    remove_empty_directory_at(catalog, name);
  }
  return removed;
}

struct Collection {
  std::string namespace_name;
  std::optional<std::string> layer;
  std::vector<Item> items;
};

std::string collection_json(const std::string& id, const Collection& collection) {
  std::vector<Box> boxes;
  std::optional<double> first;
  std::optional<double> last;
  std::vector<std::string> links = {link("root", "../catalog.json", k_json_type),
                                    link("parent", "../catalog.json", k_json_type)};
  for (const Item& item : collection.items) {
    links.push_back(link("item", "items/" + item.id + ".json", k_geojson_type));
    if (item.completed_at) {
      first = first ? std::min(*first, *item.completed_at) : *item.completed_at;
      last = last ? std::max(*last, *item.completed_at) : *item.completed_at;
    }
    if (item.box) {
      boxes.push_back(*item.box);
    }
  }
  const Box extent = joined_extent(boxes).value_or(Box{-180, -90, 180, 90});
  const std::string title =
      collection.namespace_name + (collection.layer ? " / " + *collection.layer : "");
  std::map<std::string, std::string> members = {
      {"type", json::str("Collection")},
      {"stac_version", json::str(k_stac_version)},
      {"stac_extensions", json::array({})},
      {"id", json::str(id)},
      {"title", json::str(title)},
      {"description", json::str("Outputs gdal-idem recorded as completed in namespace " +
                                collection.namespace_name +
                                (collection.layer ? ", layer " + *collection.layer : ""))},
      {"license", json::str("other")},
      {"extent",
       json::object(
           {{"spatial", json::object({{"bbox", json::array({box_json(extent)})}})},
            {"temporal",
             json::object({{"interval", json::array({json::array(
                                            {json::time(first), json::time(last)})})}})}})},
      {"idem:namespace", json::str(collection.namespace_name)},
      {"links", json::array(links)}};
  if (collection.layer) {
    members["idem:layer"] = json::str(*collection.layer);
  }
  return json::object(members) + "\n";
}

}  // namespace

std::optional<TargetGrid> output_grid_of(const LedgerRow& row) {
  return output_shape_of(row).grid;
}

StacCounts write_stac_catalog(const std::string& directory, const std::vector<LedgerRow>& rows,
                              const std::string& ledger_dsn) {
  StacCounts counts;
  // Collections by id; two namespace/layer pairs that spell one id are told apart by a digest.
  std::map<std::string, Collection> collections;
  for (const LedgerRow& row : rows) {
    if (row.state != RowState::k_completed || row.superseded_at) {
      continue;
    }
    std::string id = id_part(row.namespace_name) + (row.layer ? "-" + id_part(*row.layer) : "");
    auto found = collections.find(id);
    if (found != collections.end() &&
        (found->second.namespace_name != row.namespace_name || found->second.layer != row.layer)) {
      id += "-" + sha256_hex(row.namespace_name + '\0' + row.layer.value_or("")).substr(0, 8);
      found = collections.find(id);
    }
    if (found == collections.end()) {
      found = collections.emplace(id, Collection{row.namespace_name, row.layer, {}}).first;
    }
    found->second.items.push_back(make_item(directory, id, row, counts.without_footprint));
  }
  std::optional<DirectoryHandle> parent;
  try {
    parent = DirectoryHandle::open(dirname_of(directory));
  } catch (const UnsafePath& unsafe) {
    throw DestinationRefused("cannot write the catalog " + directory + ": " + unsafe.what());
  }
  if (!parent) {
    throw Error(ErrorKind::k_io, "cannot write the catalog " + directory + ": " +
                                     dirname_of(directory) + ": " + std::strerror(errno));
  }
  const DirectoryHandle catalog = catalog_directory(*parent, basename_of(directory));
  std::vector<std::string> catalog_links = {link("root", "./catalog.json", k_json_type)};
  std::set<std::string> current;
  for (auto& [id, collection] : collections) {
    std::sort(collection.items.begin(), collection.items.end(),
              [](const Item& a, const Item& b) { return a.id < b.id; });
    current.insert(id);
    const DirectoryHandle collection_dir = catalog_directory(catalog, id);
    const DirectoryHandle items = catalog_directory(collection_dir, "items");
    std::set<std::string> keep;
    for (const Item& item : collection.items) {
      keep.insert(item.id + ".json");
      if (write_if_changed(items, item.id + ".json", item.json, ledger_dsn)) {
        ++counts.written;
      } else {
        ++counts.unchanged;
      }
    }
    write_if_changed(collection_dir, "collection.json", collection_json(id, collection),
                     ledger_dsn);
    counts.removed += remove_stale_items(items, keep);
    catalog_links.push_back(link("child", "./" + id + "/collection.json", k_json_type));
  }
  write_if_changed(
      catalog, "catalog.json",
      json::object({{"type", json::str("Catalog")},
                    {"stac_version", json::str(k_stac_version)},
                    {"id", json::str("gdal-idem")},
                    {"description", json::str("Outputs recorded as completed in the gdal-idem "
                                              "ledger, one collection per namespace and layer")},
                    {"links", json::array(catalog_links)}}) +
          "\n",
      ledger_dsn);
  counts.removed += remove_stale_collections(catalog, current);
  counts.collections = static_cast<int64_t>(collections.size());
  return counts;
}

}  // namespace idem::cli
