// SPDX-License-Identifier: MIT
// canonical_vrt: what a GDAL release writes differently without changing the output does not
// change the canonical form; what changes the output does.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "base/canonical_json.hpp"
#include "cpl_minixml.h"
#include "key/vrt_canonical.hpp"
#include "key/vrt_reads.hpp"

namespace idem {
namespace {

std::string canonical(const std::string& metadata) {
  const std::string xml = "<VRTDataset rasterXSize=\"4\" rasterYSize=\"4\">" + metadata +
                          "<VRTRasterBand dataType=\"Byte\" band=\"1\"/></VRTDataset>";
  return canonical_vrt(xml, VrtCanonicalOptions{}).dump();
}

// GDAL 3.6 and 3.10 list a translation's IMAGE_STRUCTURE items in different orders.
TEST(KeyVrtCanonical, ImageStructureOrderDoesNotMatter) {
  EXPECT_EQ(canonical("<Metadata domain=\"IMAGE_STRUCTURE\"><MDI key=\"COMPRESSION\">DEFLATE"
                      "</MDI><MDI key=\"INTERLEAVE\">PIXEL</MDI></Metadata>"),
            canonical("<Metadata domain=\"IMAGE_STRUCTURE\"><MDI key=\"INTERLEAVE\">PIXEL</MDI>"
                      "<MDI key=\"COMPRESSION\">DEFLATE</MDI></Metadata>"));
}

TEST(KeyVrtCanonical, ImageStructureValuesStillCount) {
  EXPECT_NE(canonical("<Metadata domain=\"IMAGE_STRUCTURE\"><MDI key=\"COMPRESSION\">DEFLATE"
                      "</MDI><MDI key=\"INTERLEAVE\">PIXEL</MDI></Metadata>"),
            canonical("<Metadata domain=\"IMAGE_STRUCTURE\"><MDI key=\"COMPRESSION\">LZW"
                      "</MDI><MDI key=\"INTERLEAVE\">PIXEL</MDI></Metadata>"));
}

// vrt_reads: every element that names a dataset GDAL opens, resolved as GDAL resolves it; the
// one list the canonical form and a VRT source's identity both walk.
TEST(VrtReads, NamesEveryDatasetAVrtReadsAsGdalResolvesIt) {
  const std::string xml =
      "<VRTDataset rasterXSize=\"4\" rasterYSize=\"4\">"
      "<VRTRasterBand dataType=\"Byte\" band=\"1\"><SimpleSource>"
      "<SourceFilename relativeToVRT=\"1\">a.tif</SourceFilename></SimpleSource>"
      "<ComplexSource><SourceFilename relativeToVRT=\"0\">/data/b.tif</SourceFilename>"
      "</ComplexSource></VRTRasterBand>"
      "<GDALWarpOptions><SourceDataset relativeToVRT=\"1\">src/warp.tif</SourceDataset>"
      "<Transformer><GenImgProjTransformer><SrcGeoLocTransformer><GeoLocTransformer>"
      "<Metadata><MDI key=\"X_DATASET\">lon.tif</MDI>"
      "<MDI key=\"X_DATASET_RELATIVE_TO_SOURCE\">YES</MDI>"
      "<MDI key=\"Y_DATASET\">/geo/lat.tif</MDI></Metadata>"
      "</GeoLocTransformer></SrcGeoLocTransformer>"
      "<RPCTransformer><DEMPath>dem.tif</DEMPath></RPCTransformer>"
      "</GenImgProjTransformer></Transformer></GDALWarpOptions>"
      "<ProcessingSteps><Step><Algorithm>LocalScaleOffset</Algorithm>"
      "<Argument name=\"relativeToVRT\">true</Argument>"
      "<Argument name=\"gain_dataset_filename_1\">gain.tif</Argument>"
      "<Argument name=\"gain_dataset_band_1\">1</Argument></Step></ProcessingSteps>"
      "</VRTDataset>";
  const CPLXMLTreeCloser tree(CPLParseXMLString(xml.c_str()));
  ASSERT_TRUE(tree);
  using Kind = VrtRead::Kind;
  std::vector<std::pair<Kind, std::string>> found;
  for (const VrtRead& read : vrt_reads(tree.get(), "/vrt")) {
    found.emplace_back(read.kind, read.name);
  }
  const std::vector<std::pair<Kind, std::string>> expected = {
      {Kind::k_source, "/vrt/a.tif"},
      {Kind::k_source, "/data/b.tif"},
      {Kind::k_warp_source, "/vrt/src/warp.tif"},
      {Kind::k_geoloc_array, "/vrt/src/lon.tif"},  // relative to the warp's source
      {Kind::k_geoloc_array, "/geo/lat.tif"},
      {Kind::k_dem, "dem.tif"},
      {Kind::k_step_dataset, "/vrt/gain.tif"}};
  EXPECT_EQ(found, expected);
  // A VRT made in memory has no directory: relative names stay as written.
  std::vector<std::string> in_memory;
  for (const VrtRead& read : vrt_reads(tree.get(), "")) {
    in_memory.push_back(read.name);
  }
  EXPECT_EQ(in_memory.front(), "a.tif");
}

// The canonical form keys each dataset the VRT reads by what it is, never by its name: two VRTs
// that differ only in how they spell a missing source's path differ in the key only by that
// name's identity ({"missing": name}), never by a raw path element.
TEST(VrtReads, TheCanonicalFormReplacesEveryReadByItsIdentity) {
  const std::string xml =
      "<VRTDataset rasterXSize=\"4\" rasterYSize=\"4\">"
      "<VRTRasterBand dataType=\"Byte\" band=\"1\"><SimpleSource>"
      "<SourceFilename relativeToVRT=\"0\" shared=\"0\">/nowhere/a.tif</SourceFilename>"
      "</SimpleSource></VRTRasterBand></VRTDataset>";
  const std::string canonical_text = canonical_vrt(xml, VrtCanonicalOptions{}).dump();
  EXPECT_NE(canonical_text.find("\"source\":{\"missing\":\"/nowhere/a.tif\"}"), std::string::npos)
      << canonical_text;
  EXPECT_NE(canonical_text.find("\"shared\":\"0\""), std::string::npos) << canonical_text;
  EXPECT_EQ(canonical_text.find("relativeToVRT"), std::string::npos) << canonical_text;
}

}  // namespace
}  // namespace idem
