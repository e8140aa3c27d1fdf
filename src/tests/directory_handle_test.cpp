// SPDX-License-Identifier: MIT
// Unit tests of handles, not names (base/directory_handle, base/file_identity, base/safe_delete):
// which links a directory handle follows, that a handle stays with its directory whatever
// becomes of its path, the permission bits of a file IDEM writes over another, and the file at
// the bottom of an archive chain.
#include "base/directory_handle.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "base/file_identity.hpp"
#include "base/paths.hpp"
#include "base/safe_delete.hpp"

namespace {

using idem::DirectoryHandle;

constexpr uid_t k_nobody = 65534;

class DirectoryHandleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/idem-handles-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    m_dir = pattern;
  }
  void TearDown() override {
    const std::string command = "rm -rf '" + m_dir + "'";
    ASSERT_EQ(std::system(command.c_str()), 0);
  }
  std::string path(const std::string& name) const { return m_dir + "/" + name; }

  std::string m_dir;
};

void write_file(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
}

idem::Inode inode_at(const std::string& path) {
  struct stat info {};
  EXPECT_EQ(::stat(path.c_str(), &info), 0) << path;
  return idem::Inode::of(info);
}

TEST_F(DirectoryHandleTest, OpensADirectoryAndSaysWhyNot) {
  ASSERT_EQ(::mkdir(path("a").c_str(), 0755), 0);
  const std::optional<DirectoryHandle> handle = DirectoryHandle::open(path("a"));
  ASSERT_TRUE(handle);
  EXPECT_EQ(handle->path(), path("a"));
  EXPECT_EQ(handle->identity(), inode_at(path("a")));
  EXPECT_FALSE(DirectoryHandle::open(path("missing")));
  EXPECT_EQ(errno, ENOENT);
  write_file(path("file"), "x");
  EXPECT_FALSE(DirectoryHandle::open(path("file")));
  EXPECT_EQ(errno, ENOTDIR);
}

// A link made by root or by this process's user (the tests run as root) is followed, at any depth
// and relative or absolute; one another user owns is refused, naming it, wherever it stands.
TEST_F(DirectoryHandleTest, FollowsOnlyLinksRootOrThisUserMade) {
  ASSERT_EQ(::mkdir(path("real").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(path("real/deep").c_str(), 0755), 0);
  ASSERT_EQ(::symlink("real", path("relative").c_str()), 0);
  ASSERT_EQ(::symlink(path("real").c_str(), path("absolute").c_str()), 0);
  for (const std::string& spelling :
       {path("relative/deep"), path("absolute/deep"), path("real/../relative/deep")}) {
    const std::optional<DirectoryHandle> handle = DirectoryHandle::open(spelling);
    ASSERT_TRUE(handle) << spelling;
    EXPECT_EQ(handle->identity(), inode_at(path("real/deep"))) << spelling;
  }
  if (::geteuid() != 0) {
    GTEST_SKIP() << "a link of another user needs root to make";
  }
  ASSERT_EQ(::symlink(path("real").c_str(), path("planted").c_str()), 0);
  ASSERT_EQ(::lchown(path("planted").c_str(), k_nobody, k_nobody), 0);
  try {
    DirectoryHandle::open(path("planted/deep"));
    FAIL() << "a link another user owns must not be followed";
  } catch (const idem::UnsafePath& unsafe) {
    const std::string message = unsafe.what();
    EXPECT_NE(message.find(path("planted")), std::string::npos) << message;
    EXPECT_NE(message.find("65534"), std::string::npos) << message;
  }
}

// A handle stays with its directory: moved, or swapped for a link, its path no longer leads to
// it, and still_at_path() says so; what is done through the handle happens in the directory.
TEST_F(DirectoryHandleTest, AHandleStaysWithItsDirectory) {
  ASSERT_EQ(::mkdir(path("out").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(path("victim").c_str(), 0755), 0);
  const std::optional<DirectoryHandle> handle = DirectoryHandle::open(path("out"));
  ASSERT_TRUE(handle);
  EXPECT_TRUE(handle->still_at_path());
  ASSERT_EQ(::rename(path("out").c_str(), path("moved").c_str()), 0);
  ASSERT_EQ(::symlink(path("victim").c_str(), path("out").c_str()), 0);
  EXPECT_FALSE(handle->still_at_path());
  write_file(handle->reach("x.tif"), "through the handle");
  EXPECT_EQ(::access(path("victim/x.tif").c_str(), F_OK), -1);
  EXPECT_EQ(::access(path("moved/x.tif").c_str(), F_OK), 0);
  const std::optional<struct stat> look = handle->look("x.tif");
  ASSERT_TRUE(look);
  EXPECT_TRUE(S_ISREG(look->st_mode));
}

// The deletes of safe_delete open the directory holding the name the same way: a link another
// user made on the way is not followed (k_not_ours), a link at the name is not a file.
TEST_F(DirectoryHandleTest, DeletesNeverGoThroughAnotherUsersLink) {
  if (::geteuid() != 0) {
    GTEST_SKIP() << "a link of another user needs root to make";
  }
  ASSERT_EQ(::mkdir(path("victim").c_str(), 0755), 0);
  write_file(path("victim/precious.tif"), "precious");
  ASSERT_EQ(::symlink(path("victim").c_str(), path("out").c_str()), 0);
  ASSERT_EQ(::lchown(path("out").c_str(), k_nobody, k_nobody), 0);
  EXPECT_EQ(idem::delete_known_file(idem::KnownFile{path("out/precious.tif"), std::nullopt,
                                                    std::nullopt, std::nullopt, std::nullopt}),
            idem::DeleteOutcome::k_not_ours);
  ASSERT_EQ(::mkdir(path("victim/.idem-tmp-x").c_str(), 0700), 0);
  EXPECT_EQ(idem::delete_own_directory(path("out/.idem-tmp-x")), idem::DeleteOutcome::k_not_ours);
  EXPECT_EQ(::access(path("victim/precious.tif").c_str(), F_OK), 0);
  EXPECT_EQ(::access(path("victim/.idem-tmp-x").c_str(), F_OK), 0);
}

// A file IDEM writes over another never carries set-user-ID, set-group-ID, sticky or execute
// bits, and keeps the replaced file's read and write bits only when this user owns it.
TEST(ReplacingFileMode, NeverCopiesSpecialBitsOrAnotherUsersBits) {
  const uid_t self = ::geteuid();
  for (const mode_t mode : {04755, 02755, 01777, 06777, 0755, 0600, 0644}) {
    const mode_t ours = idem::replacing_file_mode(mode, self);
    EXPECT_EQ(ours & ~0666u, 0u) << std::oct << mode;
    EXPECT_EQ(ours, mode & 0666u) << std::oct << mode;
    EXPECT_EQ(idem::replacing_file_mode(mode, self + 1), idem::new_file_mode()) << std::oct << mode;
  }
  EXPECT_EQ(idem::new_file_mode() & ~0666u, 0u);
}

// The file a read of an archive member really reads, through chains and braces.
TEST_F(DirectoryHandleTest, TheLocalFileBeneathAnArchiveChain) {
  ASSERT_EQ(::mkdir(path("d").c_str(), 0755), 0);
  write_file(path("d/scenes.zip"), "zip");
  write_file(path("d/a.gz"), "gz");
  const std::string zip = path("d/scenes.zip");
  EXPECT_EQ(idem::local_file_beneath("/vsizip/" + zip + "/a.tif"), zip);
  EXPECT_EQ(idem::local_file_beneath("/vsizip/{" + zip + "}/a.tif"), zip);
  EXPECT_EQ(idem::local_file_beneath("/vsitar//vsiidem/" + zip + "/x/y.tif"), zip);
  EXPECT_EQ(idem::local_file_beneath("/vsisubfile/100_200," + zip), zip);
  EXPECT_EQ(idem::local_file_beneath("/vsigzip/" + path("d/a.gz")), path("d/a.gz"));
  EXPECT_EQ(idem::local_file_beneath("/vsizip//vsigzip/" + path("d/a.gz") + "/m.tif"),
            path("d/a.gz"));
  EXPECT_EQ(idem::local_file_beneath(zip), zip);
  EXPECT_FALSE(idem::local_file_beneath("/vsizip//vsis3/bucket/scenes.zip/a.tif"));
  EXPECT_FALSE(idem::local_file_beneath("/vsimem/x.tif"));
}

}  // namespace
