// SPDX-License-Identifier: MIT
// Unit tests of /vsiidem/ (plugin/vsiidem.cpp) from C++: path mapping, deferred unlinks and
// their hook, concurrent writers. This executable links the driver's code; GDAL's plugin loading
// is off (GDAL_DRIVER_PATH=disable, src/tests/CMakeLists.txt), so one copy of it runs here.
#include "vsiidem.hpp"

#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "base/paths.hpp"
#include "cpl_conv.h"
#include "cpl_vsi.h"
#include "cpl_vsi_virtual.h"
#include "gdal.h"

namespace {

bool exists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0;
}

class VsiIdemTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/idem-vsiidem-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    m_dir = pattern;
    // Keep the driver's unlink hook (when the plugin installs it) off any real ledger.
    CPLSetConfigOption("IDEM_LEDGER", ("sqlite:" + m_dir + "/ledger.db").c_str());
  }
  void TearDown() override {
    idem::vsiidem_set_unlink_hook(nullptr);
    const std::string command = "rm -rf '" + m_dir + "'";
    ASSERT_EQ(std::system(command.c_str()), 0);
    CPLSetConfigOption("IDEM_LEDGER", nullptr);
  }
  std::string make_file(const std::string& name) {
    const std::string path = m_dir + "/" + name;
    std::ofstream(path) << "data";
    return path;
  }

  std::string m_dir;
};

TEST(VsiIdemPaths, RealPathMapping) {
  EXPECT_EQ(idem::vsiidem_real_path("/vsiidem/a/b.tif"), "a/b.tif");
  EXPECT_EQ(idem::vsiidem_real_path("/vsiidem//x/y.tif"), "/x/y.tif");
  EXPECT_EQ(idem::vsiidem_real_path("/vsiidem//vsis3/bucket/k.tif"), "/vsis3/bucket/k.tif");
  EXPECT_EQ(idem::vsiidem_real_path("/tmp/x.tif"), "");
  EXPECT_TRUE(idem::is_vsiidem_path("/vsiidem/x"));
  EXPECT_FALSE(idem::is_vsiidem_path("/vsiidemx/x"));
  EXPECT_FALSE(idem::is_vsiidem_path("x.tif"));
}

TEST(VsiIdemPaths, AbsolutePathIsTheRecordedKey) {
  char cwd[4096];
  ASSERT_NE(::getcwd(cwd, sizeof(cwd)), nullptr);
  EXPECT_EQ(idem::vsiidem_absolute_path("/vsiidem/a/./b/../c.tif"), std::string(cwd) + "/a/c.tif");
  EXPECT_EQ(idem::vsiidem_absolute_path("/vsiidem//x//y.tif"), "/x/y.tif");
  EXPECT_EQ(idem::vsiidem_absolute_path("/x/y.tif"), "/x/y.tif");
}

// One split of a path for the whole tree (the temporary directory beside an output, the
// destination's directory check, /vsiidem/'s sidecar names), as POSIX dirname and basename.
TEST(VsiIdemPaths, DirnameAndBasenameSplitAsPosixDoes) {
  EXPECT_EQ(idem::dirname_of("dir/out.tif"), "dir");
  EXPECT_EQ(idem::dirname_of("out.tif"), ".");
  EXPECT_EQ(idem::dirname_of("/out.tif"), "/");
  EXPECT_EQ(idem::basename_of("dir/out.tif"), "out.tif");
  EXPECT_EQ(idem::basename_of("out.tif"), "out.tif");
}

TEST_F(VsiIdemTest, DeferredUnlinkThroughTheCppApi) {
  GDALAllRegister();
  idem::install_vsiidem_handler();
  const std::string path = make_file("a.tif");
  const std::string name = "/vsiidem/" + path;
  EXPECT_FALSE(idem::vsiidem_unlink_pending(path));
  ASSERT_EQ(VSIUnlink(name.c_str()), 0);
  EXPECT_TRUE(exists(path));
  EXPECT_TRUE(idem::vsiidem_unlink_pending(path));
  EXPECT_TRUE(idem::vsiidem_unlink_pending(name)) << "a /vsiidem/ name works too";
  VSIStatBufL info;
  EXPECT_NE(VSIStatL(name.c_str(), &info), 0) << "a pending unlink is hidden";

  idem::vsiidem_cancel_unlink(path);
  EXPECT_FALSE(idem::vsiidem_unlink_pending(path));
  EXPECT_EQ(VSIStatL(name.c_str(), &info), 0);

  ASSERT_EQ(VSIUnlink(name.c_str()), 0);
  std::vector<std::string> hooked;
  idem::vsiidem_set_unlink_hook([&hooked](const std::string& real) {
    hooked.push_back(real);
    return false;  // the ledger rows could not be removed: keep the file
  });
  idem::vsiidem_flush_unlinks();
  EXPECT_EQ(hooked, std::vector<std::string>{path});
  EXPECT_TRUE(exists(path)) << "a hook that returns false keeps the file";
  EXPECT_FALSE(idem::vsiidem_unlink_pending(path)) << "each unlink is tried once";

  ASSERT_EQ(VSIUnlink(name.c_str()), 0);
  idem::vsiidem_set_unlink_hook(
      [](const std::string&) -> bool { throw std::runtime_error("ledger down"); });
  idem::vsiidem_flush_unlinks();
  EXPECT_TRUE(exists(path)) << "a hook that throws keeps the file";

  ASSERT_EQ(VSIUnlink(name.c_str()), 0);
  idem::vsiidem_set_unlink_hook([&hooked](const std::string& real) {
    hooked.push_back(real);
    return true;
  });
  idem::vsiidem_flush_unlinks();
  EXPECT_FALSE(exists(path));
  EXPECT_EQ(hooked.size(), 2u);
}

TEST_F(VsiIdemTest, NewFileRenamedIntoPlaceCancelsThePendingUnlink) {
  GDALAllRegister();
  idem::install_vsiidem_handler();
  const std::string path = make_file("b.tif");
  const std::string name = "/vsiidem/" + path;
  ASSERT_EQ(VSIUnlink(name.c_str()), 0);
  VSILFILE* file = VSIFOpenL(name.c_str(), "wb");
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(VSIFWriteL("new!", 1, 4, file), 4u);
  EXPECT_TRUE(idem::vsiidem_unlink_pending(path))
      << "not cancelled before the new file is in place";
  ASSERT_EQ(VSIFCloseL(file), 0);
  EXPECT_FALSE(idem::vsiidem_unlink_pending(path));
  idem::vsiidem_flush_unlinks();
  std::ifstream in(path);
  std::string content;
  in >> content;
  EXPECT_EQ(content, "new!");
}

// Many threads writing, reading back, unlinking and rewriting distinct files at once.
TEST_F(VsiIdemTest, ConcurrentWritersAndUnlinks) {
  GDALAllRegister();
  idem::install_vsiidem_handler();
  CPLSetConfigOption("IDEM_FSYNC", "NO");
  constexpr int k_threads = 8;
  constexpr int k_files = 25;
  std::vector<std::thread> threads;
  for (int t = 0; t < k_threads; ++t) {
    threads.emplace_back([this, t]() {
      for (int i = 0; i < k_files; ++i) {
        const std::string name =
            "/vsiidem/" + m_dir + "/f" + std::to_string(t) + "_" + std::to_string(i);
        for (int round = 0; round < 2; ++round) {
          VSILFILE* file = VSIFOpenL(name.c_str(), "wb");
          if (file == nullptr) {
            ADD_FAILURE() << "open " << name;
            return;
          }
          const std::string content = name + "#" + std::to_string(round);
          VSIFWriteL(content.data(), 1, content.size(), file);
          VSIStatBufL info;
          EXPECT_EQ(VSIStatL(name.c_str(), &info), 0);
          EXPECT_EQ(VSIFCloseL(file), 0);
          if (round == 0) {
            EXPECT_EQ(VSIUnlink(name.c_str()), 0);
            EXPECT_NE(VSIStatL(name.c_str(), &info), 0);
          }
        }
      }
    });
  }
  for (auto& thread : threads) {
    thread.join();
  }
  CPLSetConfigOption("IDEM_FSYNC", nullptr);
  idem::vsiidem_flush_unlinks();  // every unlink was cancelled by the rewrite
  int files = 0;
  DIR* dir = ::opendir(m_dir.c_str());
  ASSERT_NE(dir, nullptr);
  while (const dirent* entry = ::readdir(dir)) {
    const std::string entry_name = entry->d_name;
    EXPECT_EQ(entry_name.rfind(".idem-tmp-", 0), std::string::npos) << entry_name;
    if (entry_name[0] == 'f') {
      std::ifstream in(m_dir + "/" + entry_name);
      std::string content;
      in >> content;
      EXPECT_EQ(content, "/vsiidem/" + m_dir + "/" + entry_name + "#1");
      ++files;
    }
  }
  ::closedir(dir);
  EXPECT_EQ(files, k_threads * k_files);
}

}  // namespace
