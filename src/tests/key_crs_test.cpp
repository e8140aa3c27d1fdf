// SPDX-License-Identifier: MIT
// CRS normalisation: one CRS in any spelling gives one key input; a different CRS never does.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.hpp"
#include "cpl_conv.h"
#include "key/crs_normalize.hpp"
#include "ogr_spatialref.h"

namespace idem {
namespace {

// normalize_crs as a string: the authority code, or the canonical JSON of the fallback.
std::string normalized_crs_text(const std::string& definition) {
  const JsonValue normalized = normalize_crs(definition);
  return normalized.is_string() ? normalized.text() : normalized.dump();
}

std::string export_as(const char* definition, const char* format) {
  OGRSpatialReference srs;
  EXPECT_EQ(srs.SetFromUserInput(definition), OGRERR_NONE);
  char* text = nullptr;
  const std::string which = format;
  if (which == "WKT1") {
    srs.exportToWkt(&text);
  } else if (which == "PROJJSON") {
    srs.exportToPROJJSON(&text, nullptr);
  } else {
    const char* const options[] = {"FORMAT=WKT2_2019", "MULTILINE=YES", nullptr};
    srs.exportToWkt(&text, options);
  }
  std::string result = text != nullptr ? text : "";
  CPLFree(text);
  return result;
}

const char* const k_web_mercator_proj =
    "+proj=merc +a=6378137 +b=6378137 +lat_ts=0 +lon_0=0 +x_0=0 +y_0=0 +k=1 +units=m "
    "+nadgrids=@null +wktext +no_defs";

TEST(KeyCrs, WebMercatorInEverySpellingIsEpsg3857) {
  const std::vector<std::string> spellings = {
      "EPSG:3857",
      "epsg:3857",
      "Epsg:3857",
      "urn:ogc:def:crs:EPSG::3857",
      "http://www.opengis.net/def/crs/EPSG/0/3857",
      export_as("EPSG:3857", "WKT1"),
      export_as("EPSG:3857", "WKT2"),
      "\n" + export_as("EPSG:3857", "WKT2") + "\n",
      export_as("EPSG:3857", "PROJJSON"),
      k_web_mercator_proj,
  };
  for (const auto& spelling : spellings) {
    EXPECT_EQ(normalized_crs_text(spelling), "EPSG:3857") << spelling;
  }
}

TEST(KeyCrs, UtmSpellingsAgree) {
  for (const char* format : {"WKT1", "WKT2", "PROJJSON"}) {
    EXPECT_EQ(normalized_crs_text(export_as("EPSG:32631", format)), "EPSG:32631") << format;
  }
  EXPECT_EQ(normalized_crs_text("EPSG:32631"), "EPSG:32631");
}

TEST(KeyCrs, AnyParameterChangeDoesNotCollapse) {
  const std::vector<std::string> different = {
      "+proj=merc +a=6378137 +b=6378137 +lat_ts=0 +lon_0=0.0001 +x_0=0 +y_0=0 +k=1 +units=m "
      "+nadgrids=@null +wktext +no_defs",
      "+proj=merc +a=6378137 +b=6378137 +lat_ts=0 +lon_0=0 +x_0=1 +y_0=0 +k=1 +units=m "
      "+nadgrids=@null +wktext +no_defs",
      "+proj=merc +a=6378137 +b=6378137 +lat_ts=0 +lon_0=0 +x_0=0 +y_0=0 +k=1 +units=ft "
      "+nadgrids=@null +wktext +no_defs",
      "+proj=merc +datum=WGS84 +units=m +no_defs",  // ellipsoidal Mercator, not 3857
  };
  for (const auto& definition : different) {
    EXPECT_NE(normalized_crs_text(definition), "EPSG:3857") << definition;
  }
  const std::string shifted_utm =
      normalized_crs_text("+proj=utm +zone=31 +datum=WGS84 +units=m +x_0=500001 +no_defs");
  EXPECT_NE(shifted_utm, "EPSG:32631");
  EXPECT_NE(shifted_utm, normalized_crs_text("+proj=utm +zone=31 +datum=WGS84 +units=m +no_defs"));
  EXPECT_NE(normalized_crs_text("EPSG:32631"), normalized_crs_text("EPSG:32632"));
  EXPECT_NE(normalized_crs_text("EPSG:4326"), normalized_crs_text("EPSG:4269"));
}

TEST(KeyCrs, UnidentifiedCrsFallsBackToProjJson) {
  const JsonValue crs = normalize_crs("+proj=merc +lon_0=12.345 +datum=WGS84 +units=m +no_defs");
  ASSERT_TRUE(crs.is_object());
  ASSERT_NE(crs.find("projjson"), nullptr);
  EXPECT_NE(crs.find("projjson")->text().find("12.345"), std::string::npos);
  // Deterministic: the same definition gives the same text.
  EXPECT_EQ(crs.dump(),
            normalize_crs("+proj=merc +lon_0=12.345 +datum=WGS84 +units=m +no_defs").dump());
}

TEST(KeyCrs, DataAxisMappingIsRecordedAsDirections) {
  // EPSG:4326 is lat/lon; GDAL reads rasters in traditional GIS order (mapping 2,1).
  const JsonValue a = normalize_crs_with_axes("EPSG:4326", "2,1");
  EXPECT_EQ(a.dump(), R"({"crs":"EPSG:4326","data_axes":["EAST","NORTH"]})");
  const JsonValue b = normalize_crs_with_axes("EPSG:4326", "1,2");
  EXPECT_EQ(b.dump(), R"({"crs":"EPSG:4326","data_axes":["NORTH","EAST"]})");
  const JsonValue c = normalize_crs_with_axes("EPSG:3857", "1,2");
  EXPECT_EQ(c.dump(), R"({"crs":"EPSG:3857","data_axes":["EAST","NORTH"]})");
}

TEST(KeyCrs, BadCrsIsAUsageError) {
  try {
    normalize_crs("EPSG:999999");
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::k_usage);
    EXPECT_NE(std::string(error.what()).find("EPSG:999999"), std::string::npos);
  }
  EXPECT_THROW(normalize_crs("not a crs at all"), Error);
  EXPECT_THROW(normalize_crs(""), Error);
  EXPECT_THROW(normalize_crs("/etc/passwd"), Error);  // file access refused
}

}  // namespace
}  // namespace idem
