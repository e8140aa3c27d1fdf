// SPDX-License-Identifier: MIT
// describe_work on the datasets GDAL hands a CreateCopy driver: a warped VRT (as gdalwarp
// builds it), a translation VRT, a plain dataset, and gdalwarp's materialised temporary GTiff.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "base/gdal_compat.hpp"
#include "gdal_priv.h"
#include "gdal_utils.h"
#include "key/work_key.hpp"

namespace idem {
namespace {

const std::string k_golden_src = std::string(IDEM_TEST_DATA_DIR) + "/key_golden_src.tif";

GDALDatasetUniquePtr open(const std::string& path) {
  GDALAllRegister();
  return GDALDatasetUniquePtr(GDALDataset::Open(path.c_str(), GDAL_OF_RASTER));
}

// gdalwarp -of VRT: the same VRTWarpedDataset gdalwarp hands IDEM in memory.
GDALDatasetUniquePtr warped(const std::vector<std::string>& args) {
  GDALAllRegister();
  CPLStringList argv;
  for (const auto& arg : args) {
    argv.AddString(arg.c_str());
  }
  GDALWarpAppOptions* options = GDALWarpAppOptionsNew(argv.List(), nullptr);
  GDALDatasetH sources[] = {GDALOpen(k_golden_src.c_str(), GA_ReadOnly)};
  GDALDatasetH result = GDALWarp("", nullptr, 1, sources, options, nullptr);
  GDALWarpAppOptionsFree(options);
  // The warped VRT reads from the source: the source stays open for the test's life.
  static std::vector<GDALDatasetUniquePtr> open_sources;
  open_sources.emplace_back(GDALDataset::FromHandle(sources[0]));
  return GDALDatasetUniquePtr(GDALDataset::FromHandle(result));
}

KeyOptions key_options() {
  KeyOptions options;
  options.destination = "/data/out/tile.tif";
  return options;
}

TEST(KeyDescribe, WarpedVrtIsAWarpWithItsGrid) {
  auto vrt = warped({"-of", "VRT", "-t_srs", "EPSG:3857", "-ts", "40", "30"});
  ASSERT_TRUE(vrt);
  const WorkDescription work = describe_work(vrt.get(), key_options());
  EXPECT_TRUE(work.is_warp);
  EXPECT_FALSE(work.source_was_materialised);
  EXPECT_EQ(work.grid.x_size, 40);
  EXPECT_EQ(work.grid.y_size, 30);
  EXPECT_TRUE(work.grid.has_geotransform);
  EXPECT_NE(work.grid.srs_wkt.find("Pseudo-Mercator"), std::string::npos);
  EXPECT_EQ(work.key, compute_key("default", work.canonical_json));
  EXPECT_NE(work.canonical_json.find("\"EPSG:3857\""), std::string::npos);
  EXPECT_EQ(work.canonical_json.find("WarpMemoryLimit"), std::string::npos);
  EXPECT_EQ(work.canonical_json.find("key_golden_src"), std::string::npos);  // no paths
}

TEST(KeyDescribe, AttemptSettingsDoNotChangeTheKey) {
  auto a = warped({"-of", "VRT", "-t_srs", "EPSG:3857"});
  auto b = warped(
      {"-of", "VRT", "-t_srs", "EPSG:3857", "-wm", "1000", "-wo", "NUM_THREADS=3", "-multi"});
  EXPECT_EQ(describe_work(a.get(), key_options()).key, describe_work(b.get(), key_options()).key);
}

TEST(KeyDescribe, KeyOptionsGoIn) {
  auto vrt = warped({"-of", "VRT", "-t_srs", "EPSG:3857"});
  const std::string base = describe_work(vrt.get(), key_options()).key;
  KeyOptions options = key_options();
  options.namespace_name = "other";
  EXPECT_NE(describe_work(vrt.get(), options).key, base);
  options = key_options();
  options.format = "COG";
  EXPECT_NE(describe_work(vrt.get(), options).key, base);
  options = key_options();
  options.destination = "/data/out/other.tif";
  EXPECT_NE(describe_work(vrt.get(), options).key, base);
  options = key_options();
  options.creation_options = {{"compress", "DEFLATE"}};
  const std::string lower = describe_work(vrt.get(), options).key;
  options.creation_options = {{"COMPRESS", "DEFLATE"}, {"num_threads", "ALL_CPUS"}};
  EXPECT_EQ(describe_work(vrt.get(), options).key, lower);
  EXPECT_NE(lower, base);
  options = key_options();
  options.format = "gtiff";  // driver names are case-insensitive in GDAL
  EXPECT_EQ(describe_work(vrt.get(), options).key, base);
}

TEST(KeyDescribe, PlainDatasetIsACopyOfItsFiles) {
  auto dataset = open(k_golden_src);
  ASSERT_TRUE(dataset);
  const WorkDescription work = describe_work(dataset.get(), key_options());
  EXPECT_FALSE(work.is_warp);
  EXPECT_NE(work.canonical_json.find("\"kind\":\"copy\""), std::string::npos);
  EXPECT_NE(work.canonical_json.find("\"sha256_tree\""), std::string::npos);
}

TEST(KeyDescribe, MaterialisedTemporaryGtiffIsFlagged) {
  char pattern[] = "/tmp/idem-key-describe-XXXXXX";
  const std::string dir = ::mkdtemp(pattern);
  // gdalwarp's name for it (src/base/gdal_compat.hpp).
#if IDEM_GDAL_MULTI_SOURCE_TEMP_IS_GENERATED
  const std::string temp = dir + "/tile.tif_" + std::to_string(::getpid()) + "_1";
#else
  const std::string temp = dir + "/tile.tif.tmp.tif";
#endif
  {
    auto source = open(k_golden_src);
    GDALDriver* gtiff = GetGDALDriverManager()->GetDriverByName("GTiff");
    GDALDatasetUniquePtr copy(
        gtiff->CreateCopy(temp.c_str(), source.get(), FALSE, nullptr, nullptr, nullptr));
    ASSERT_TRUE(copy);
  }
  auto dataset = open(temp);
  KeyOptions options = key_options();
  options.destination = dir + "/tile.tif";
  const WorkDescription work = describe_work(dataset.get(), options);
  EXPECT_TRUE(work.source_was_materialised);
  EXPECT_NE(work.canonical_json.find("\"kind\":\"materialised\""), std::string::npos);
  dataset.reset();
  std::system(("rm -rf '" + dir + "'").c_str());
}

TEST(KeyDescribe, EmptyNamespaceIsRefused) {
  auto dataset = open(k_golden_src);
  KeyOptions options = key_options();
  options.namespace_name.clear();
  EXPECT_THROW(describe_work(dataset.get(), options), Error);
}

}  // namespace
}  // namespace idem
