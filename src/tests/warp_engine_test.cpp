// SPDX-License-Identifier: MIT
// Unit tests of idem::materialise() (plugin/warp_engine.cpp) on the datasets GDAL really hands a
// CreateCopy-only driver: an in-memory VRTWarpedDataset from GDALWarp(-of VRT) whose source is
// named relative to the current directory (docs/internals.md §1), and an in-memory VRTDataset from
// GDALTranslate(-of VRT). Outputs are compared pixel for pixel with GDALWarp()/GDALTranslate()
// writing GTiff directly.
#include "warp_engine.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "cpl_conv.h"
#include "cpl_string.h"
#include "cpl_vsi.h"
#include "gdal_priv.h"
#include "gdal_utils.h"
#include "gdalwarp_rules.hpp"
#include "key/source_identity.hpp"
#include "ogr_spatialref.h"

namespace {

constexpr int k_size = 384;

class WarpEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GDALAllRegister();
    char pattern[] = "/tmp/idem_warp_engine_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    m_dir = pattern;
    char cwd[4096];
    ASSERT_NE(getcwd(cwd, sizeof(cwd)), nullptr);
    m_previous_cwd = cwd;
    ASSERT_EQ(chdir(m_dir.c_str()), 0);
    write_source("src.tif");
  }

  void TearDown() override {
    if (!m_previous_cwd.empty()) {
      EXPECT_EQ(chdir(m_previous_cwd.c_str()), 0);
    }
    if (!m_dir.empty()) {
      VSIRmdirRecursive(m_dir.c_str());
    }
  }

  static void write_source(const char* path) {
    GDALDriver* gtiff = GetGDALDriverManager()->GetDriverByName("GTiff");
    GDALDatasetUniquePtr ds(gtiff->Create(path, k_size, k_size, 3, GDT_Byte, nullptr));
    ASSERT_TRUE(ds);
    double geotransform[6] = {440000, 25, 0, 4650000, 0, -25};
    ds->SetGeoTransform(geotransform);
    OGRSpatialReference srs;
    srs.importFromEPSG(32633);
    ds->SetSpatialRef(&srs);
    std::vector<GByte> row(k_size);
    unsigned seed = 7;
    for (int band = 1; band <= 3; ++band) {
      for (int y = 0; y < k_size; ++y) {
        for (int x = 0; x < k_size; ++x) {
          seed = seed * 1103515245u + 12345u;
          row[x] = static_cast<GByte>((x * band + y * 3 + ((seed >> 16) % 23)) % 256);
        }
        ASSERT_EQ(ds->GetRasterBand(band)->RasterIO(GF_Write, 0, y, k_size, 1, row.data(), k_size,
                                                    1, GDT_Byte, 0, 0, nullptr),
                  CE_None);
      }
    }
  }

  // What gdalwarp hands IDEM: an in-memory warped VRT (no file name), source relative to the CWD.
  static GDALDatasetUniquePtr warped_vrt(const std::vector<std::string>& args) {
    return warp("", args, "VRT");
  }

  static GDALDatasetUniquePtr warp(const char* dest, const std::vector<std::string>& args,
                                   const char* format) {
    CPLStringList argv;
    argv.AddString("-of");
    argv.AddString(format);
    for (const auto& arg : args) {
      argv.AddString(arg.c_str());
    }
    GDALWarpAppOptions* options = GDALWarpAppOptionsNew(argv.List(), nullptr);
    GDALDatasetH source = GDALOpen("src.tif", GA_ReadOnly);
    GDALDatasetH result = GDALWarp(dest, nullptr, 1, &source, options, nullptr);
    GDALWarpAppOptionsFree(options);
    GDALReleaseDataset(source);  // a warped VRT keeps its own reference
    return GDALDatasetUniquePtr(GDALDataset::FromHandle(result));
  }

  static GDALDatasetUniquePtr translate(const char* dest, const std::vector<std::string>& args,
                                        const char* format) {
    CPLStringList argv;
    argv.AddString("-of");
    argv.AddString(format);
    for (const auto& arg : args) {
      argv.AddString(arg.c_str());
    }
    GDALTranslateOptions* options = GDALTranslateOptionsNew(argv.List(), nullptr);
    GDALDatasetH source = GDALOpen("src.tif", GA_ReadOnly);
    GDALDatasetH result = GDALTranslate(dest, source, options, nullptr);
    GDALTranslateOptionsFree(options);
    GDALReleaseDataset(source);
    return GDALDatasetUniquePtr(GDALDataset::FromHandle(result));
  }

  static idem::MaterialiseRequest request_for(GDALDataset* source, const char* format,
                                              const std::string& output) {
    idem::MaterialiseRequest request;
    request.source = source;
    request.format_driver = GetGDALDriverManager()->GetDriverByName(format);
    request.output_path = output;
    request.scratch_dir = "scratch";
    VSIMkdir("scratch", 0755);
    return request;
  }

  static long differing_pixels(GDALDataset* a, GDALDataset* b) {
    EXPECT_EQ(a->GetRasterXSize(), b->GetRasterXSize());
    EXPECT_EQ(a->GetRasterYSize(), b->GetRasterYSize());
    EXPECT_EQ(a->GetRasterCount(), b->GetRasterCount());
    const int width = a->GetRasterXSize();
    const int height = a->GetRasterYSize();
    std::vector<double> pa(static_cast<size_t>(width) * height);
    std::vector<double> pb(pa.size());
    long differ = 0;
    for (int band = 1; band <= a->GetRasterCount(); ++band) {
      EXPECT_EQ(a->GetRasterBand(band)->RasterIO(GF_Read, 0, 0, width, height, pa.data(), width,
                                                 height, GDT_Float64, 0, 0, nullptr),
                CE_None);
      EXPECT_EQ(b->GetRasterBand(band)->RasterIO(GF_Read, 0, 0, width, height, pb.data(), width,
                                                 height, GDT_Float64, 0, 0, nullptr),
                CE_None);
      for (size_t i = 0; i < pa.size(); ++i) {
        differ += pa[i] != pb[i] ? 1 : 0;
      }
    }
    return differ;
  }

  // Entries of a directory, "." and ".." left out.
  static int entry_count(const char* dir) {
    const CPLStringList entries(VSIReadDir(dir));
    int count = 0;
    for (int i = 0; i < entries.size(); ++i) {
      if (!EQUAL(entries[i], ".") && !EQUAL(entries[i], "..")) {
        ++count;
      }
    }
    return count;
  }

  static bool exists(const std::string& path) {
    VSIStatBufL stat;
    return VSIStatL(path.c_str(), &stat) == 0;
  }

  std::string m_dir;
  std::string m_previous_cwd;
};

struct ProgressRecord {
  double last = -1.0;
  double cancel_at = 2.0;
  int calls = 0;
};

int CPL_STDCALL record_progress(double complete, const char*, void* data) {
  auto* record = static_cast<ProgressRecord*>(data);
  record->last = complete;
  ++record->calls;
  return complete >= record->cancel_at ? FALSE : TRUE;
}

TEST_F(WarpEngineTest, WarpedVrtMatchesDirectGdalwarp) {
  for (const char* error_threshold : {"0.125", "0"}) {
    const std::vector<std::string> args = {"-t_srs",   "EPSG:3857", "-r",
                                           "bilinear", "-et",       error_threshold};
    GDALDatasetUniquePtr vrt = warped_vrt(args);
    ASSERT_TRUE(vrt);
    ProgressRecord progress;
    auto request = request_for(vrt.get(), "GTiff", "idem.tif");
    request.progress = record_progress;
    request.progress_data = &progress;
    GDALDatasetUniquePtr output = idem::materialise(request);
    ASSERT_TRUE(output);
    EXPECT_EQ(progress.last, 1.0);
    GDALDatasetUniquePtr direct = warp("direct.tif", args, "GTiff");
    ASSERT_TRUE(direct);
    EXPECT_EQ(differing_pixels(output.get(), direct.get()), 0) << "-et " << error_threshold;
    output.reset();
    direct.reset();
    vrt.reset();
    VSIUnlink("idem.tif");
    VSIUnlink("direct.tif");
  }
}

// With the source the key opened at hand, the warp runs on the VRT's own warp operation, its
// options and transformer (borrowed, never destroyed: the VRT still warps with them afterwards,
// with its own source again, and frees them once) and gives the pixels of a rebuilt transformer
// and of a direct warp.
TEST_F(WarpEngineTest, WarpWithTheVrtsTransformerLeavesItToTheVrt) {
  const std::vector<std::string> args = {"-t_srs", "EPSG:3857", "-r", "cubic"};
  GDALDatasetUniquePtr vrt = warped_vrt(args);
  ASSERT_TRUE(vrt);
  // The VRT's serialisation names its warp operation's source: the kept source is opened under
  // another spelling of the name, which must not stay behind in it.
  const std::string vrt_xml_before = vrt->GetMetadata("xml:VRT")[0];
  idem::KeptSources kept;
  kept.keep("src.tif", GDALDataset::FromHandle(GDALOpen("./src.tif", GA_ReadOnly)));

  // The warp prepared with IDEM_WARP_REUSE_TRANSFORMER=`reuse`, written to `output`.
  const auto warp_with = [&](const char* reuse, const char* output) {
    CPLConfigOptionSetter reuse_option("IDEM_WARP_REUSE_TRANSFORMER", reuse, false);
    idem::PreparedWarpPtr warp = idem::prepare_warp(vrt.get(), nullptr, &kept);
    EXPECT_TRUE(warp);
    auto request = request_for(vrt.get(), "GTiff", output);
    request.prepared_warp = warp.get();
    idem::MaterialiseReport report;
    request.report = &report;
    GDALDatasetUniquePtr result = idem::materialise(request);
    EXPECT_TRUE(report.warped);
    EXPECT_EQ(report.options_adopted, EQUAL(reuse, "YES"));
    EXPECT_EQ(report.ran_vrt_operation, EQUAL(reuse, "YES"));
    EXPECT_TRUE(report.kept_source);
    return result;
  };
  GDALDatasetUniquePtr adopted = warp_with("YES", "adopted.tif");
  GDALDatasetUniquePtr rebuilt = warp_with("NO", "rebuilt.tif");
  ASSERT_TRUE(adopted && rebuilt);
  EXPECT_EQ(differing_pixels(adopted.get(), rebuilt.get()), 0);
  GDALDatasetUniquePtr direct = warp("direct.tif", args, "GTiff");
  ASSERT_TRUE(direct);
  EXPECT_EQ(differing_pixels(adopted.get(), direct.get()), 0);

  // The VRT's warp operation has its own source back, and its transformer is alive: reading
  // the VRT warps a block with it, as a VRT that lent nothing does.
  EXPECT_EQ(vrt->GetMetadata("xml:VRT")[0], vrt_xml_before);
  const auto first_block = [](GDALDataset* dataset) {
    std::vector<GByte> block(64 * 64);
    EXPECT_EQ(dataset->GetRasterBand(1)->RasterIO(GF_Read, 0, 0, 64, 64, block.data(), 64, 64,
                                                  GDT_Byte, 0, 0, nullptr),
              CE_None);
    return block;
  };
  GDALDatasetUniquePtr untouched = warped_vrt(args);
  ASSERT_TRUE(untouched);
  EXPECT_EQ(first_block(vrt.get()), first_block(untouched.get()));
  vrt.reset();  // frees the transformer once
}

// Without the source the key opened (the VRT names it with open options, or nothing was kept),
// the options are deserialised: the source is opened by name as the VRT describes it.
TEST_F(WarpEngineTest, WarpWithoutAKeptSourceRebuildsTheTransformer) {
  GDALDatasetUniquePtr vrt = warped_vrt({"-t_srs", "EPSG:3857"});
  ASSERT_TRUE(vrt);
  idem::KeptSources kept;
  idem::PreparedWarpPtr warp = idem::prepare_warp(vrt.get(), nullptr, &kept);
  ASSERT_TRUE(warp);
  auto request = request_for(vrt.get(), "GTiff", "unkept.tif");
  request.prepared_warp = warp.get();
  idem::MaterialiseReport report;
  request.report = &report;
  GDALDatasetUniquePtr result = idem::materialise(request);
  ASSERT_TRUE(result);
  EXPECT_TRUE(report.warped);
  EXPECT_FALSE(report.options_adopted);
  EXPECT_FALSE(report.ran_vrt_operation);
  EXPECT_FALSE(report.kept_source);
  result.reset();
  VSIUnlink("unkept.tif");
}

TEST_F(WarpEngineTest, NodataAndAlphaFollowTheVrt) {
  const std::vector<std::string> args = {"-t_srs", "EPSG:3857", "-dstnodata", "7", "-dstalpha"};
  GDALDatasetUniquePtr vrt = warped_vrt(args);
  ASSERT_TRUE(vrt);
  GDALDatasetUniquePtr output = idem::materialise(request_for(vrt.get(), "GTiff", "idem.tif"));
  GDALDatasetUniquePtr direct = warp("direct.tif", args, "GTiff");
  ASSERT_EQ(output->GetRasterCount(), 4);
  EXPECT_EQ(output->GetRasterBand(4)->GetColorInterpretation(), GCI_AlphaBand);
  int has_nodata = FALSE;
  EXPECT_EQ(output->GetRasterBand(1)->GetNoDataValue(&has_nodata), 7.0);
  EXPECT_TRUE(has_nodata);
  EXPECT_EQ(differing_pixels(output.get(), direct.get()), 0);
}

TEST_F(WarpEngineTest, CogGoesThroughAScratchGTiff) {
  const std::vector<std::string> args = {"-t_srs", "EPSG:3857", "-r", "cubic"};
  GDALDatasetUniquePtr vrt = warped_vrt(args);
  auto request = request_for(vrt.get(), "COG", "idem_cog.tif");
  request.creation_options.SetNameValue("COMPRESS", "DEFLATE");
  GDALDatasetUniquePtr output = idem::materialise(request);
  ASSERT_TRUE(output);
  output.reset();
  GDALDatasetUniquePtr reopened(GDALDataset::Open("idem_cog.tif"));
  ASSERT_TRUE(reopened);
  EXPECT_STREQ(reopened->GetMetadataItem("LAYOUT", "IMAGE_STRUCTURE"), "COG");
  EXPECT_EQ(entry_count("scratch"), 0) << "scratch GTiff left behind";
  GDALDatasetUniquePtr direct = warp("direct.tif", args, "GTiff");
  EXPECT_EQ(differing_pixels(reopened.get(), direct.get()), 0);
}

TEST_F(WarpEngineTest, CancellationThrowsAndLeavesNothing) {
  for (const char* format : {"GTiff", "COG"}) {
    GDALDatasetUniquePtr vrt = warped_vrt({"-t_srs", "EPSG:3857", "-wm", "1"});
    ProgressRecord progress;
    progress.cancel_at = 0.3;
    auto request = request_for(vrt.get(), format, "cancelled.tif");
    request.progress = record_progress;
    request.progress_data = &progress;
    try {
      idem::materialise(request);
      ADD_FAILURE() << format << ": no exception";
    } catch (const idem::Error& error) {
      EXPECT_EQ(error.kind(), idem::ErrorKind::k_io);
      EXPECT_NE(std::string(error.what()).find("cancelled"), std::string::npos) << error.what();
    }
    EXPECT_FALSE(exists("cancelled.tif")) << format;
    EXPECT_EQ(entry_count("scratch"), 0) << format;
  }
}

TEST_F(WarpEngineTest, TranslateVrtIsCopiedLikeGdalTranslate) {
  const std::vector<std::string> args = {"-outsize", "61%", "53%", "-b", "3",   "-b",        "1",
                                         "-scale",   "0",   "255", "10", "200", "-a_nodata", "9"};
  GDALDatasetUniquePtr vrt = translate("", args, "VRT");
  ASSERT_TRUE(vrt);
  ProgressRecord progress;
  auto request = request_for(vrt.get(), "GTiff", "idem.tif");
  request.progress = record_progress;
  request.progress_data = &progress;
  GDALDatasetUniquePtr output = idem::materialise(request);
  ASSERT_TRUE(output);
  EXPECT_EQ(progress.last, 1.0);
  GDALDatasetUniquePtr direct = translate("direct.tif", args, "GTiff");
  EXPECT_EQ(differing_pixels(output.get(), direct.get()), 0);
  EXPECT_EQ(output->GetRasterBand(1)->GetNoDataValue(), 9.0);
}

TEST_F(WarpEngineTest, FailureOfTheInnerDriverIsReported) {
  GDALDatasetUniquePtr vrt = warped_vrt({"-t_srs", "EPSG:3857"});
  auto request = request_for(vrt.get(), "GTiff", "no_such_dir/idem.tif");
  try {
    idem::materialise(request);
    FAIL() << "no exception";
  } catch (const idem::Error& error) {
    EXPECT_EQ(error.kind(), idem::ErrorKind::k_io);
    EXPECT_NE(std::string(error.what()).find("no_such_dir"), std::string::npos) << error.what();
  }
}

}  // namespace

// gdalwarp's call for a plain mosaic, read from its command line (plugin/gdalwarp_rules.hpp).
TEST(GdalwarpCommand, ReadsTheOptionsOfGdalwarpOnly) {
  using idem::GdalwarpCommand;
  const std::vector<std::string> sources{"a.tif", "b.tif"};
  EXPECT_EQ(GdalwarpCommand::of_command({}, sources), nullptr);
  EXPECT_EQ(GdalwarpCommand::of_command({"/usr/bin/python3", "-c", "gdal.Warp()"}, sources),
            nullptr);
  const auto mosaic = GdalwarpCommand::of_command({"/usr/bin/gdalwarp",
                                                   "--config",
                                                   "IDEM_LEDGER",
                                                   "sqlite:x",
                                                   "--config",
                                                   "A=B",
                                                   "-q",
                                                   "-overwrite",
                                                   "-of",
                                                   "IDEM",
                                                   "-co",
                                                   "FORMAT=GTiff",
                                                   "-srcnodata",
                                                   "0",
                                                   "-wm",
                                                   "64",
                                                   "-multi",
                                                   "-wo",
                                                   "NUM_THREADS=2",
                                                   "-cvmd",
                                                   "x y",
                                                   "a.tif",
                                                   "-dstnodata",
                                                   "-9999",
                                                   "b.tif",
                                                   "/vsiidem/out.tif"},
                                                  sources);
  ASSERT_NE(mosaic, nullptr);
  EXPECT_EQ(mosaic->arguments(),
            (std::vector<std::string>{"-srcnodata", "0", "-wm", "64", "-multi", "-wo",
                                      "NUM_THREADS=2", "-cvmd", "x y", "-dstnodata", "-9999"}));
  EXPECT_EQ(mosaic->key_arguments(),
            (std::vector<std::string>{"-srcnodata", "0", "-cvmd", "x y", "-dstnodata", "-9999"}));
}

TEST(GdalwarpCommand, RefusesACommandWhoseSourcesAreNotTheMosaics) {
  try {
    idem::GdalwarpCommand::of_command({"gdalwarp", "a.tif", "c.tif", "out.tif"},
                                      {"a.tif", "b.tif"});
    FAIL() << "other sources must be refused";
  } catch (const idem::Error& error) {
    EXPECT_EQ(error.kind(), idem::ErrorKind::k_usage);
    EXPECT_NE(std::string(error.what()).find("a.tif c.tif"), std::string::npos) << error.what();
  }
}

TEST(GdalwarpCommand, ReadsAnOptfileAsGdalReadsIt) {
  char pattern[] = "/tmp/idem_optfile_XXXXXX";
  const int fd = mkstemp(pattern);
  ASSERT_GE(fd, 0);
  const std::string text = "# comment -nomd\n-cvmd \"two words\" a.tif\n";
  ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  const auto mosaic = idem::GdalwarpCommand::of_command(
      {"gdalwarp", "--optfile", pattern, "b.tif", "out.tif"}, {"a.tif", "b.tif"});
  unlink(pattern);
  ASSERT_NE(mosaic, nullptr);
  EXPECT_EQ(mosaic->arguments(), (std::vector<std::string>{"-cvmd", "two words"}));
}

// gdalwarp's call warping into the output, as `gdal-idem key` tells it (each argument
// URL-escaped): for the output it names only.
TEST(GdalwarpCommand, ReadsTheWarpIntoTheOutputItNames) {
  const CPLConfigOptionSetter told(
      "IDEM_INTERNAL_GDALWARP_COMMAND",
      "gdalwarp -q -of IDEM -co FORMAT=COG -oo NUM_THREADS=1 -if GTiff -t_srs EPSG%3A3857 "
      "-te 1 2 3 4 a.tif b%20c.tif /vsiidem//data/out.tif",
      false);
  const auto command = idem::GdalwarpCommand::of_this_process_warping_into("/data/out.tif");
  ASSERT_NE(command, nullptr);
  EXPECT_EQ(command->source_names(), (std::vector<std::string>{"a.tif", "b c.tif"}));
  EXPECT_EQ(command->arguments(),
            (std::vector<std::string>{"-oo", "NUM_THREADS=1", "-if", "GTiff", "-t_srs", "EPSG:3857",
                                      "-te", "1", "2", "3", "4"}));
  EXPECT_TRUE(command->has_option("-te"));
  EXPECT_FALSE(command->has_option("-ts"));
  EXPECT_EQ(idem::GdalwarpCommand::of_this_process_warping_into("/data/other.tif"), nullptr);
  try {
    command->open_sources(nullptr);
    FAIL() << "a source that does not exist must be refused";
  } catch (const idem::Error& error) {
    EXPECT_EQ(error.kind(), idem::ErrorKind::k_source);
    EXPECT_NE(std::string(error.what()).find("a.tif"), std::string::npos) << error.what();
  }
}

TEST(GdalwarpCommand, IsNoneOutsideGdalwarp) {
  const CPLConfigOptionSetter told("IDEM_INTERNAL_GDALWARP_COMMAND",
                                   "gdal_translate -of IDEM a.tif /vsiidem//data/out.tif", false);
  EXPECT_EQ(idem::GdalwarpCommand::of_this_process_warping_into("/data/out.tif"), nullptr);
}
