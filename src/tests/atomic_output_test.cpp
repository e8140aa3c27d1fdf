// SPDX-License-Identifier: MIT
// Unit tests of the commit protocol (work/atomic_output): what commit() publishes and in which
// order, that nothing is published without it, and the errors for unusable directories.
#include "work/atomic_output.hpp"

#include <dirent.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/inotify.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "base/file_identity.hpp"
#include "base/paths.hpp"
#include "cpl_conv.h"
#include "work/early_sync.hpp"
#include "work/output_check.hpp"
#include "work/temp_dir.hpp"

namespace {

using idem::AtomicOutput;
using idem::Error;
using idem::ErrorKind;

class AtomicOutputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/idem-atomic-output-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    m_dir = pattern;
  }
  void TearDown() override {
    const std::string command = "rm -rf '" + m_dir + "'";
    ASSERT_EQ(std::system(command.c_str()), 0);
  }

  std::string path(const std::string& name) const { return m_dir + "/" + name; }
  // The temporary directory of `output` by its name beside the final path (temp_dir() reaches it
  // by its handle).
  std::string temp_dir_of(const AtomicOutput& output) const { return path(output.temp_name()); }

  std::string m_dir;
};

void write_file(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
  ASSERT_TRUE(out.good()) << path;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

bool exists(const std::string& path) {
  struct stat info {};
  return ::lstat(path.c_str(), &info) == 0;
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> names =
      idem::directory_entries(dir).value_or(std::vector<std::string>());
  std::sort(names.begin(), names.end());
  return names;
}

bool has_temp_dir(const std::string& dir) {
  for (const auto& name : entries(dir)) {
    if (name.rfind(idem::k_temp_prefix, 0) == 0) {
      return true;
    }
  }
  return false;
}

// The names moved into `dir`, in the order the kernel reports the renames.
std::vector<std::string> read_moved_to(int inotify_fd) {
  std::vector<std::string> names;
  alignas(inotify_event) char buffer[8192];
  for (;;) {
    const ssize_t got = ::read(inotify_fd, buffer, sizeof(buffer));
    if (got <= 0) {
      break;
    }
    for (ssize_t offset = 0; offset < got;) {
      const auto* event = reinterpret_cast<const inotify_event*>(buffer + offset);
      if ((event->mask & IN_MOVED_TO) != 0 && event->len > 0) {
        names.emplace_back(event->name);
      }
      offset += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
    }
  }
  return names;
}

// The driver writes through the temporary directory's handle (/proc/self/fd/N/<basename>): what
// it writes lands in .idem-tmp-<token>/<basename> beside the final path.
TEST_F(AtomicOutputTest, TempPathKeepsBasenameInsideTempDirBesideFinal) {
  AtomicOutput output(path("tile.tif"), "tok1");
  EXPECT_EQ(output.temp_name(), ".idem-tmp-tok1");
  EXPECT_EQ(idem::basename_of(output.temp_path()), "tile.tif");
  struct stat info {};
  ASSERT_EQ(::lstat(path(".idem-tmp-tok1").c_str(), &info), 0);
  EXPECT_TRUE(S_ISDIR(info.st_mode));
  EXPECT_EQ(info.st_mode & 0777, 0700u);
  write_file(output.temp_path(), "pixels");
  EXPECT_EQ(read_file(path(".idem-tmp-tok1/tile.tif")), "pixels");
}

TEST_F(AtomicOutputTest, CommitPublishesEveryFilePrimaryLast) {
  const int inotify_fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  ASSERT_GE(inotify_fd, 0);
  ASSERT_GE(::inotify_add_watch(inotify_fd, m_dir.c_str(), IN_MOVED_TO), 0);

  AtomicOutput output(path("out.tif"), "tok2");
  // Sidecars named by the driver after the primary's basename; some sort after it, some before.
  write_file(output.temp_dir() + "/out.tif.aux.xml", "aux");
  write_file(output.temp_path(), "primary");
  write_file(output.temp_dir() + "/out.tif.ovr", "ovr");
  write_file(output.temp_dir() + "/a.msk", "mask");

  const std::vector<std::string> published = output.commit();

  ASSERT_EQ(published.size(), 4u);
  EXPECT_EQ(published.back(), path("out.tif"));
  EXPECT_EQ(read_file(path("out.tif")), "primary");
  EXPECT_EQ(read_file(path("out.tif.aux.xml")), "aux");
  EXPECT_EQ(read_file(path("out.tif.ovr")), "ovr");
  EXPECT_EQ(read_file(path("a.msk")), "mask");

  const std::vector<std::string> moved = read_moved_to(inotify_fd);
  ::close(inotify_fd);
  ASSERT_EQ(moved.size(), 4u);
  EXPECT_EQ(moved.back(), "out.tif") << "the primary must be renamed into place last";
}

TEST_F(AtomicOutputTest, NoTemporaryLeftAfterCommit) {
  {
    AtomicOutput output(path("x.tif"), "tok3");
    write_file(output.temp_path(), "data");
    output.commit(/*durable=*/false);
    EXPECT_FALSE(exists(temp_dir_of(output)));
  }
  EXPECT_FALSE(has_temp_dir(m_dir));
  EXPECT_EQ(entries(m_dir), std::vector<std::string>{"x.tif"});
}

TEST_F(AtomicOutputTest, CommitReplacesAnExistingOutput) {
  write_file(path("x.tif"), "old");
  AtomicOutput output(path("x.tif"), "tok4");
  write_file(output.temp_path(), "new");
  EXPECT_EQ(read_file(path("x.tif")), "old") << "nothing changes before commit";
  output.commit();
  EXPECT_EQ(read_file(path("x.tif")), "new");
}

// The tree a completion would record of the directory `name` in `dir`.
std::string tree_of(const std::string& dir, const std::string& name) {
  const std::optional<idem::DirectoryHandle> handle = idem::DirectoryHandle::open(dir);
  const std::optional<idem::TreeSummary> tree = idem::tree_summary_at(*handle, name);
  return tree ? tree->sha256 : std::string();
}

// A directory dataset (Zarr) replaces the directory of the output it replaces (the tree a
// completion recorded there), which comes back on a roll back and is removed once the publish is
// settled.
TEST_F(AtomicOutputTest, ADirectoryReplacesADirectoryAndComesBackOnARollBack) {
  ASSERT_EQ(::mkdir(path("x.zarr").c_str(), 0755), 0);
  write_file(path("x.zarr/old"), "old");
  for (const bool keep : {false, true}) {
    AtomicOutput output(path("x.zarr"), keep ? "tokd2" : "tokd1");
    output.allow_replacing_directory(tree_of(m_dir, "x.zarr"));
    ASSERT_EQ(::mkdir(output.temp_path().c_str(), 0755), 0);
    write_file(output.temp_path() + "/new", "new");
    output.publish(false);
    EXPECT_EQ(entries(path("x.zarr")), std::vector<std::string>{"new"});
    if (keep) {
      output.settle();
      EXPECT_FALSE(exists(temp_dir_of(output)));
    } else {
      output.roll_back();
      EXPECT_EQ(entries(path("x.zarr")), std::vector<std::string>{"old"});
    }
  }
  EXPECT_EQ(read_file(path("x.zarr/new")), "new");
  EXPECT_EQ(entries(m_dir), std::vector<std::string>{"x.zarr"});
}

// A directory no completion recorded (or one changed since: a file added) is never replaced: the
// publish is refused and the directory stays whole, as plain GDAL refuses to write over an
// existing dataset.
TEST_F(AtomicOutputTest, ADirectoryNotRecordedAsItIsIsNeverReplaced) {
  ASSERT_EQ(::mkdir(path("x.zarr").c_str(), 0755), 0);
  write_file(path("x.zarr/.zgroup"), "{}");
  write_file(path("x.zarr/theirs"), "someone's array");
  const std::string recorded = tree_of(m_dir, "x.zarr");
  for (const bool vouched : {false, true}) {
    AtomicOutput output(path("x.zarr"), vouched ? "tokf2" : "tokf1");
    if (vouched) {
      output.allow_replacing_directory(recorded);
      write_file(path("x.zarr/added"), "added after the completion");
    }
    ASSERT_EQ(::mkdir(output.temp_path().c_str(), 0755), 0);
    write_file(output.temp_path() + "/new", "new");
    EXPECT_THROW(output.publish(false), idem::DestinationRefused);
  }
  EXPECT_EQ(read_file(path("x.zarr/theirs")), "someone's array");
  EXPECT_EQ(read_file(path("x.zarr/added")), "added after the completion");
  EXPECT_EQ(entries(m_dir), std::vector<std::string>{"x.zarr"});
}

// Handles, not names: a directory on the output's path swapped for a link while the work ran
// (by a user who owns it) never redirects the publish; nothing is published, nothing changes
// where the link leads, and the attempt's own files go.
TEST_F(AtomicOutputTest, APublishNeverFollowsADirectorySwappedForALink) {
  ASSERT_EQ(::mkdir(path("out").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(path("elsewhere").c_str(), 0755), 0);
  write_file(path("elsewhere/x.tif"), "not yours");
  {
    AtomicOutput output(path("out/x.tif"), "toks");
    write_file(output.temp_path(), "pixels");
    ASSERT_EQ(::rename(path("out").c_str(), path("moved").c_str()), 0);
    ASSERT_EQ(::symlink(path("elsewhere").c_str(), path("out").c_str()), 0);
    EXPECT_THROW(output.publish(false), idem::DestinationRefused);
  }
  EXPECT_EQ(read_file(path("elsewhere/x.tif")), "not yours");
  EXPECT_EQ(entries(path("elsewhere")), std::vector<std::string>{"x.tif"});
  EXPECT_TRUE(entries(path("moved")).empty());
}

// A living writer's temporary directory is locked for its whole life (reap leaves it alone); a
// writer gone, its lock goes with it.
TEST_F(AtomicOutputTest, ATemporaryDirectoryIsLockedWhileItsWriterLives) {
  const std::optional<idem::DirectoryHandle> dir = idem::DirectoryHandle::open(m_dir);
  ASSERT_TRUE(dir);
  {
    AtomicOutput output(path("x.tif"), "tokl");
    EXPECT_TRUE(idem::temp_dir_is_locked(*dir, output.temp_name()));
    ASSERT_EQ(::mkdir(path(".idem-tmp-dead").c_str(), 0700), 0);
    EXPECT_FALSE(idem::temp_dir_is_locked(*dir, ".idem-tmp-dead"));
  }
  EXPECT_EQ(entries(m_dir), std::vector<std::string>{".idem-tmp-dead"});
}

TEST_F(AtomicOutputTest, DestructorCleansUpAndNeverPublishes) {
  std::string temp_dir;
  {
    AtomicOutput output(path("x.tif"), "tok5");
    temp_dir = temp_dir_of(output);
    write_file(output.temp_path(), "partial");
    write_file(output.temp_dir() + "/x.tif.aux.xml", "aux");
    ASSERT_EQ(::mkdir((output.temp_dir() + "/nested").c_str(), 0755), 0);
    write_file(output.temp_dir() + "/nested/f", "f");
  }
  EXPECT_FALSE(exists(temp_dir));
  EXPECT_FALSE(exists(path("x.tif")));
  EXPECT_TRUE(entries(m_dir).empty());
}

TEST_F(AtomicOutputTest, CommitWithoutPrimaryFailsAndPublishesNothing) {
  {
    AtomicOutput output(path("x.tif"), "tok6");
    write_file(output.temp_dir() + "/x.tif.aux.xml", "aux");
    try {
      output.commit();
      FAIL() << "commit without the primary file must throw";
    } catch (const Error& error) {
      EXPECT_EQ(error.kind(), ErrorKind::k_io);
      EXPECT_NE(std::string(error.what()).find("x.tif"), std::string::npos) << error.what();
    }
  }
  EXPECT_TRUE(entries(m_dir).empty());
}

TEST_F(AtomicOutputTest, CommitTwiceIsAnError) {
  AtomicOutput output(path("x.tif"), "tok7");
  write_file(output.temp_path(), "data");
  output.commit(false);
  EXPECT_THROW(output.commit(false), Error);
  EXPECT_EQ(read_file(path("x.tif")), "data");
}

TEST_F(AtomicOutputTest, MissingDirectorySaysCreateItFirst) {
  const std::string missing = path("no/such/dir");
  try {
    AtomicOutput output(missing + "/x.tif", "tok8");
    FAIL() << "a missing directory must throw";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::k_io);
    const std::string message = error.what();
    EXPECT_NE(message.find(missing), std::string::npos) << message;
    EXPECT_NE(message.find("does not exist; create it first"), std::string::npos) << message;
  }
}

TEST_F(AtomicOutputTest, ParentThatIsARegularFileIsReported) {
  write_file(path("plain"), "not a directory");
  try {
    AtomicOutput output(path("plain/x.tif"), "tok9");
    FAIL() << "a parent that is a file must throw";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::k_io);
    const std::string message = error.what();
    EXPECT_NE(message.find(path("plain")), std::string::npos) << message;
    EXPECT_NE(message.find("not a directory"), std::string::npos) << message;
  }
}

TEST_F(AtomicOutputTest, NonPublishableVirtualFilesystemPathIsAUsageError) {
  try {
    AtomicOutput output("/vsimem/x.tif", "tok10");
    FAIL() << "a /vsimem/ path must throw";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::k_usage);
    EXPECT_NE(std::string(error.what()).find("/vsimem/x.tif"), std::string::npos);
  }
}

// An object output's temporary copy is local (CPL_TMPDIR); a failed upload publishes nothing
// and the destructor still removes the local copy. (Uploads themselves are tested against a
// real S3-compatible server in autotest/test_object_store.py.)
TEST_F(AtomicOutputTest, ObjectOutputIsWrittenUnderCplTmpdir) {
  CPLSetConfigOption("CPL_TMPDIR", m_dir.c_str());
  std::string temp_dir;
  {
    AtomicOutput output("/vsis3/bucket/tiles/x.tif", "tok11");
    CPLSetConfigOption("CPL_TMPDIR", nullptr);
    EXPECT_TRUE(output.is_object());
    EXPECT_EQ(output.temp_name(), ".idem-tmp-tok11");
    temp_dir = temp_dir_of(output);
    write_file(output.temp_path(), "bytes");
    // No server at the endpoint: the upload fails, naming the object.
    CPLSetConfigOption("AWS_S3_ENDPOINT", "127.0.0.1:9");
    CPLSetConfigOption("AWS_HTTPS", "NO");
    CPLSetConfigOption("AWS_NO_SIGN_REQUEST", "YES");
    CPLSetConfigOption("GDAL_HTTP_MAX_RETRY", "0");
    try {
      output.commit();
      FAIL() << "an upload to a closed port must throw";
    } catch (const Error& error) {
      EXPECT_EQ(error.kind(), ErrorKind::k_io);
      EXPECT_NE(std::string(error.what()).find("/vsis3/bucket/tiles/x.tif"), std::string::npos)
          << error.what();
    }
    for (const char* key :
         {"AWS_S3_ENDPOINT", "AWS_HTTPS", "AWS_NO_SIGN_REQUEST", "GDAL_HTTP_MAX_RETRY"}) {
      CPLSetConfigOption(key, nullptr);
    }
    struct stat info {};
    EXPECT_EQ(::stat(temp_dir.c_str(), &info), 0);
  }
  struct stat info {};
  EXPECT_NE(::stat(temp_dir.c_str(), &info), 0) << "the local copy must be removed";
}

// A directory (a Zarr) has no object that appears at once: refused before any request, so
// the store is never asked (no server is needed to show it).
TEST_F(AtomicOutputTest, ADirectoryIsNeverUploaded) {
  CPLSetConfigOption("CPL_TMPDIR", m_dir.c_str());
  AtomicOutput output("/vsis3/bucket/x.zarr", "tok12");
  CPLSetConfigOption("CPL_TMPDIR", nullptr);
  ASSERT_EQ(::mkdir(output.temp_path().c_str(), 0755), 0);
  write_file(output.temp_path() + "/.zgroup", "{}");
  try {
    output.commit();
    FAIL() << "a directory must not be uploaded";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::k_usage);
    EXPECT_NE(std::string(error.what()).find("/vsis3/bucket/x.zarr"), std::string::npos)
        << error.what();
  }
}

TEST_F(AtomicOutputTest, ExistingTokenIsRefused) {
  AtomicOutput first(path("x.tif"), "same");
  EXPECT_THROW(AtomicOutput(path("x.tif"), "same"), Error);
  EXPECT_TRUE(exists(temp_dir_of(first)))
      << "the failed second attempt must not remove the first's";
}

// Root ignores permission bits, so a read-only directory needs a read-only filesystem: a tmpfs
// mounted read-only in a private mount namespace of a child process (skipped where the
// container does not allow it).
TEST_F(AtomicOutputTest, ReadOnlyFilesystemIsReported) {
  const std::string mount_point = path("ro");
  ASSERT_EQ(::mkdir(mount_point.c_str(), 0755), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::unshare(CLONE_NEWNS) != 0 ||
        ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", mount_point.c_str(), "tmpfs", MS_RDONLY, nullptr) != 0) {
      ::_exit(77);
    }
    try {
      AtomicOutput output(mount_point + "/x.tif", "tok11");
      ::_exit(1);
    } catch (const Error& error) {
      const std::string message = error.what();
      const bool good = error.kind() == ErrorKind::k_io &&
                        message.find(mount_point) != std::string::npos &&
                        message.find("read-only") != std::string::npos;
      ::_exit(good ? 0 : 2);
    }
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) {
    GTEST_SKIP() << "cannot mount a read-only tmpfs here";
  }
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: no error, 2: wrong error kind or message";
}

// EarlySync syncs the file while it is being written (a file that does not exist yet is waited
// for), through a descriptor of that very file, and stops when destroyed. Each chunk written is
// followed by a wait for a sync that saw it (an event, not a pause).
TEST_F(AtomicOutputTest, EarlySyncSyncsTheFileWhileItIsWritten) {
  const std::string path = m_dir + "/growing.tif";
  std::mutex mutex;
  std::condition_variable synced;
  std::vector<std::pair<ino_t, off_t>> calls;  // inode and size seen at each sync
  const auto wait_for_a_sync_of = [&](off_t size) {
    std::unique_lock<std::mutex> lock(mutex);
    return synced.wait_for(lock, std::chrono::seconds(60),
                           [&] { return !calls.empty() && calls.back().second >= size; });
  };
  {
    idem::EarlySync early(path, std::chrono::milliseconds(10), [&](int fd) {
      struct stat info {};
      if (::fstat(fd, &info) != 0) {
        return -1;
      }
      {
        std::lock_guard<std::mutex> lock(mutex);
        calls.emplace_back(info.st_ino, info.st_size);
      }
      synced.notify_all();
      return ::fdatasync(fd);
    });
    std::ofstream out(path, std::ios::binary);
    const std::string chunk(1 << 20, 'x');
    for (int i = 0; i < 6; ++i) {
      out.write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
      out.flush();
      EXPECT_TRUE(wait_for_a_sync_of(static_cast<off_t>(chunk.size()) * (i + 1))) << "chunk " << i;
    }
  }
  struct stat info {};
  ASSERT_EQ(::stat(path.c_str(), &info), 0);
  std::lock_guard<std::mutex> lock(mutex);
  ASSERT_GE(calls.size(), 6u);
  for (const auto& call : calls) {
    EXPECT_EQ(call.first, info.st_ino);
  }
  EXPECT_LT(calls.front().second, info.st_size);  // synced before the writing ended
  EXPECT_GT(calls.back().second, calls.front().second);
}

// Destroyed, it stops at once, not at the end of its period: with an hour's period, a keeper that
// waited for it would hold the test until ctest's timeout fails it.
TEST_F(AtomicOutputTest, EarlySyncStopsPromptlyAndNeverNeedsTheFile) {
  int calls = 0;
  {
    idem::EarlySync early(m_dir + "/never-written.tif", std::chrono::hours(1), [&](int) {
      ++calls;
      return 0;
    });
  }
  EXPECT_EQ(calls, 0);
}

TEST_F(AtomicOutputTest, SyncOfAMissingFileThrowsNamingIt) {
  const std::optional<idem::DirectoryHandle> dir = idem::DirectoryHandle::open(m_dir);
  ASSERT_TRUE(dir);
  try {
    idem::sync_at(*dir, "no-such-file");
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::k_io);
    EXPECT_NE(std::string(error.what()).find(path("no-such-file")), std::string::npos);
  }
}

}  // namespace
