// SPDX-License-Identifier: MIT
// Source digests: the content digest (SHA-256 over the SHA-256 of each 1 MiB piece) agrees with
// a reference computed here in one piece of code from the definition in docs/keys.md, whichever
// way the file is read; the cache hits on an unchanged file and misses once the file's identity
// (including ctime) changes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <string>

#include "base/error.hpp"
#include "cpl_conv.h"
#include "cpl_vsi.h"
#include "key/source_digest.hpp"

namespace idem {
namespace {

class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/idem-key-digest-XXXXXX";
    m_path = ::mkdtemp(pattern);
  }
  ~TempDir() { std::system(("rm -rf '" + m_path + "'").c_str()); }
  std::string file(const std::string& name) const { return m_path + "/" + name; }

 private:
  std::string m_path;
};

void write_random(const std::string& path, std::size_t size, unsigned seed) {
  std::mt19937 engine(seed);
  std::string data(size, '\0');
  for (auto& c : data) {
    c = static_cast<char>(engine() & 0xff);
  }
  std::ofstream(path, std::ios::binary).write(data.data(), static_cast<std::streamsize>(size));
}

std::string raw_sha256(const std::string& data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(data.data(), data.size(), digest, &length, EVP_sha256(), nullptr);
  return std::string(reinterpret_cast<const char*>(digest), length);
}

// docs/keys.md: leaves are SHA-256(0x00 || piece) over 1 MiB pieces (the last one shorter, none
// for an empty file); the digest is hex SHA-256(0x01 || size as 8 bytes big-endian || leaves).
std::string reference_content_digest(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string root(1, '\x01');
  for (int shift = 56; shift >= 0; shift -= 8) {
    root += static_cast<char>((static_cast<uint64_t>(bytes.size()) >> shift) & 0xff);
  }
  for (std::size_t offset = 0; offset < bytes.size(); offset += 1u << 20) {
    root += raw_sha256(std::string(1, '\0') + bytes.substr(offset, 1u << 20));
  }
  static const char k_hex[] = "0123456789abcdef";
  std::string hex;
  for (const unsigned char c : raw_sha256(root)) {
    hex += k_hex[c >> 4];
    hex += k_hex[c & 0x0f];
  }
  return hex;
}

// Overwrite one byte and put size and mtime back (as `touch -r` would): only ctime tells.
void flip_byte_keep_mtime(const std::string& path, long offset) {
  struct stat before;
  ASSERT_EQ(::stat(path.c_str(), &before), 0);
  std::fstream file(path, std::ios::binary | std::ios::in | std::ios::out);
  file.seekg(offset);
  char c = 0;
  file.read(&c, 1);
  c = static_cast<char>(c ^ 0x01);
  file.seekp(offset);
  file.write(&c, 1);
  file.close();
  const struct timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
}

// Returns once the clock that stamps ctime (the kernel's coarse real-time clock) has passed the
// ctime of `path`: a change made then gets another ctime. An event to wait for (a clock tick,
// a few milliseconds at most), not a pause of a guessed length.
void wait_past_ctime(const std::string& path) {
  const int64_t ctime_ns = local_file_identity(path).ctime_ns;
  timespec now{};
  do {
    ::clock_gettime(CLOCK_REALTIME_COARSE, &now);
  } while (static_cast<int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec <= ctime_ns);
}

TEST(KeyDigest, MatchesTheDefinitionOnSeveralSizes) {
  TempDir dir;
  // Empty, one byte, one piece less a byte, exactly one piece, one piece and a byte, exactly four
  // (the /vsi read size), several and a part.
  const std::size_t sizes[] = {
      0, 1, (1u << 20) - 1, 1u << 20, (1u << 20) + 1, 4u << 20, (4u << 20) + 1, (9u << 20) + 12345};
  unsigned seed = 1;
  for (const std::size_t size : sizes) {
    const std::string path = dir.file("f" + std::to_string(size));
    write_random(path, size, seed++);
    const std::string expected = reference_content_digest(path);
    EXPECT_EQ(content_digest_of_file(path), expected) << size;
    EXPECT_EQ(digest_local_file(path, nullptr), expected) << size;
    // Through GDAL's /vsi layer (streamed in 4 MiB reads, one thread): the same value.
    const std::string memory = "/vsimem/idem-key-digest-" + std::to_string(size);
    ASSERT_EQ(CPLCopyFile(memory.c_str(), path.c_str()), 0);
    EXPECT_EQ(content_digest_of_file(memory), expected) << size;
    VSIUnlink(memory.c_str());
  }
  // Known answer: SHA-256 of the 9 bytes 0x01 and eight zeros (the empty file's size).
  EXPECT_EQ(content_digest_of_file(dir.file("f0")),
            "a536aa3cede6ea3c1f3e0357c3c60e0f216a8c89b853df13b29daa8f85065dfb");
}

TEST(KeyDigest, VsiPathsAreHashedThroughGdal) {
  TempDir dir;
  const std::string path = dir.file("v.bin");
  write_random(path, (5u << 20) + 7, 42);
  const std::string memory = "/vsimem/idem-key-digest.bin";
  {
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    VSILFILE* out = VSIFOpenL(memory.c_str(), "wb");
    ASSERT_NE(out, nullptr);
    VSIFWriteL(bytes.data(), 1, bytes.size(), out);
    VSIFCloseL(out);
  }
  const SourceDigest digest = digest_source_file(memory, SourceDigestPolicy::k_auto, nullptr);
  EXPECT_EQ(digest.method, "sha256_tree");
  EXPECT_EQ(digest.value, reference_content_digest(path));
  VSIUnlink(memory.c_str());
}

TEST(KeyDigest, CacheHitsWhenUnchangedAndMissesOnCtimeChange) {
  TempDir dir;
  const std::string path = dir.file("cached.bin");
  write_random(path, 100000, 7);
  InMemoryDigestCache cache;
  // The file was written just now: only with no racy window is its digest cached at once.
  CPLConfigOptionSetter no_window("IDEM_DIGEST_RACY_SECONDS", "0", false);
  const std::string first = digest_local_file(path, &cache);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_TRUE(cache.get(path, local_file_identity(path)).has_value());

  EXPECT_EQ(*cache.get(path, local_file_identity(path)), "sha256_tree:" + first);

  // A planted wrong digest proves the second call is served by the cache.
  cache.put(path, local_file_identity(path), "sha256_tree:cached-value");
  EXPECT_EQ(digest_local_file(path, &cache), "cached-value");
  // A value without the method (a plain SHA-256 cached by an older version) is a miss.
  cache.put(path, local_file_identity(path), "cached-value");
  EXPECT_EQ(digest_local_file(path, &cache), first);

  wait_past_ctime(path);
  flip_byte_keep_mtime(path, 500);
  const FileIdentity after = local_file_identity(path);
  EXPECT_FALSE(cache.get(path, after).has_value());
  const std::string second = digest_local_file(path, &cache);
  EXPECT_NE(second, first);
  EXPECT_EQ(second, reference_content_digest(path));
}

// Git's racy entry: a file changed within the window before its hash began may change again
// without a new identity (a write through a memory mapping to a page already dirty leaves its
// times alone), so its digest is not cached; once its times are older than the window, it is.
TEST(KeyDigest, DigestOfAFileChangedWithinTheRacyWindowIsNotCached) {
  TempDir dir;
  const std::string path = dir.file("racy.bin");
  write_random(path, 100000, 8);
  InMemoryDigestCache cache;
  {
    const std::string digest = digest_local_file(path, &cache);  // the kernel's window, >= 2 s
    EXPECT_EQ(digest, reference_content_digest(path));
    EXPECT_EQ(cache.size(), 0u);
  }
  {
    CPLConfigOptionSetter window("IDEM_DIGEST_RACY_SECONDS", "3600", false);
    digest_local_file(path, &cache);
    EXPECT_EQ(cache.size(), 0u);
  }
  {
    CPLConfigOptionSetter window("IDEM_DIGEST_RACY_SECONDS", "0", false);
    digest_local_file(path, &cache);
    EXPECT_EQ(cache.size(), 1u);
  }
  for (const char* bad : {"-1", "soon", "1e12"}) {
    CPLConfigOptionSetter window("IDEM_DIGEST_RACY_SECONDS", bad, false);
    try {
      digest_local_file(path, &cache);
      ADD_FAILURE() << bad << " was taken";
    } catch (const Error& error) {
      EXPECT_EQ(error.kind(), ErrorKind::k_usage);
      EXPECT_NE(std::string(error.what()).find("IDEM_DIGEST_RACY_SECONDS"), std::string::npos);
    }
  }
}

// A describe reads its sources' digests ahead (with the CRS memo) and serves them from what it
// read; a file changed since then must be hashed again, never served the digest read before.
TEST(KeyDigest, PrefetchedDigestsServeOnlyTheIdentityTheyWereReadFor) {
  TempDir dir;
  const std::string path = dir.file("prefetched.bin");
  write_random(path, 100000, 11);
  CPLConfigOptionSetter no_window("IDEM_DIGEST_RACY_SECONDS", "0", false);  // written now
  InMemoryDigestCache backing;
  const FileIdentity before = local_file_identity(path);
  // A planted wrong digest as what was read ahead: served while the file is unchanged.
  PrefetchedDigestCache prefetched(backing, {{path, before}}, {{path, "sha256_tree:read-ahead"}});
  EXPECT_EQ(backing.size(), 0u);
  EXPECT_EQ(digest_local_file(path, &prefetched), "read-ahead");

  wait_past_ctime(path);
  flip_byte_keep_mtime(path, 500);
  const std::string after = digest_local_file(path, &prefetched);
  EXPECT_EQ(after, reference_content_digest(path));  // hashed again, and recorded
  EXPECT_EQ(*backing.get(path, local_file_identity(path)), "sha256_tree:" + after);

  // What was not found ahead (or not asked) is asked of the backing cache.
  const std::string other = dir.file("other.bin");
  write_random(other, 1000, 12);
  backing.put(other, local_file_identity(other), "sha256_tree:put-meanwhile");
  PrefetchedDigestCache missed(backing, {{other, local_file_identity(other)}}, {});
  EXPECT_EQ(digest_local_file(other, &missed), "put-meanwhile");
}

TEST(KeyDigest, CacheIsKeyedByIdentityNotPathSpelling) {
  TempDir dir;
  const std::string path = dir.file("spelled.bin");
  write_random(path, 1000, 9);
  CPLConfigOptionSetter no_window("IDEM_DIGEST_RACY_SECONDS", "0", false);  // written now
  InMemoryDigestCache cache;
  digest_local_file(path, &cache);
  const std::string other_spelling = dir.file("./spelled.bin");
  EXPECT_TRUE(cache.get(other_spelling, local_file_identity(other_spelling)).has_value());
}

TEST(KeyDigest, UnreadableSourceIsASourceErrorNamingTheFile) {
  try {
    digest_local_file("/nonexistent/idem/source.tif", nullptr);
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::k_source);
    EXPECT_NE(std::string(error.what()).find("/nonexistent/idem/source.tif"), std::string::npos);
  }
  EXPECT_THROW(content_digest_of_file("/vsimem/does-not-exist"), Error);
}

// Something that opens but is not a regular file (here a directory, whose reads fail with
// EISDIR) is a source error naming the path, not a digest of what could be read.
TEST(KeyDigest, ReadErrorIsASourceErrorNamingTheFile) {
  char pattern[] = "/tmp/idem-digest-dir-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  try {
    content_digest_of_file(pattern);
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::k_source);
    EXPECT_NE(std::string(error.what()).find(pattern), std::string::npos) << error.what();
  }
  ::rmdir(pattern);
}

TEST(KeyDigest, PolicyParsing) {
  EXPECT_EQ(parse_source_digest_policy("auto"), SourceDigestPolicy::k_auto);
  EXPECT_EQ(parse_source_digest_policy("Content"), SourceDigestPolicy::k_content);
  EXPECT_EQ(parse_source_digest_policy("ETAG"), SourceDigestPolicy::k_etag);
  EXPECT_THROW(parse_source_digest_policy("md5"), Error);
  EXPECT_TRUE(is_object_store_path("/vsis3/bucket/key.tif"));
  EXPECT_TRUE(is_object_store_path("/vsicurl/https://example.com/a.tif"));
  EXPECT_FALSE(is_object_store_path("/vsizip/a.zip/b.tif"));
  EXPECT_FALSE(is_object_store_path("/data/a.tif"));
}

}  // namespace
}  // namespace idem
