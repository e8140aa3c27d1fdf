// SPDX-License-Identifier: MIT
// canonical_vrt: what a GDAL release writes differently without changing the output does not
// change the canonical form; what changes the output does.
#include <gtest/gtest.h>

#include <string>

#include "base/canonical_json.hpp"
#include "key/vrt_canonical.hpp"

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

}  // namespace
}  // namespace idem
