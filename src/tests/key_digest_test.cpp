// Source digests: streamed SHA-256 agrees with `openssl dgst -sha256`; the cache hits on an
// unchanged file and misses once the file's identity (including ctime) changes.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <string>

#include "core/error.hpp"
#include "core/source_digest.hpp"
#include "cpl_vsi.h"

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

std::string openssl_sha256(const std::string& path) {
  const std::string command = "openssl dgst -sha256 -r '" + path + "'";
  FILE* pipe = ::popen(command.c_str(), "r");
  char buffer[256] = {};
  const std::size_t got = std::fread(buffer, 1, sizeof(buffer) - 1, pipe);
  ::pclose(pipe);
  return std::string(buffer, got).substr(0, 64);
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

TEST(KeyDigest, MatchesOpensslOnSeveralSizes) {
  TempDir dir;
  // Empty, small, exactly one block, one block and a byte, several blocks.
  const std::size_t sizes[] = {0, 1, 1000, 4u << 20, (4u << 20) + 1, (9u << 20) + 12345};
  unsigned seed = 1;
  for (const std::size_t size : sizes) {
    const std::string path = dir.file("f" + std::to_string(size));
    write_random(path, size, seed++);
    EXPECT_EQ(sha256_of_file(path), openssl_sha256(path)) << size;
    EXPECT_EQ(digest_local_file(path, nullptr), openssl_sha256(path)) << size;
  }
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
  EXPECT_EQ(digest.method, "sha256");
  EXPECT_EQ(digest.value, openssl_sha256(path));
  VSIUnlink(memory.c_str());
}

TEST(KeyDigest, CacheHitsWhenUnchangedAndMissesOnCtimeChange) {
  TempDir dir;
  const std::string path = dir.file("cached.bin");
  write_random(path, 100000, 7);
  InMemoryDigestCache cache;
  const std::string first = digest_local_file(path, &cache);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_TRUE(cache.get(path, local_file_identity(path)).has_value());

  // A planted wrong digest proves the second call is served by the cache.
  cache.put(path, local_file_identity(path), "cached-value");
  EXPECT_EQ(digest_local_file(path, &cache), "cached-value");

  ::usleep(20000);  // let the clock move so ctime differs
  flip_byte_keep_mtime(path, 500);
  const FileIdentity after = local_file_identity(path);
  EXPECT_FALSE(cache.get(path, after).has_value());
  const std::string second = digest_local_file(path, &cache);
  EXPECT_NE(second, first);
  EXPECT_EQ(second, openssl_sha256(path));
}

TEST(KeyDigest, CacheIsKeyedByIdentityNotPathSpelling) {
  TempDir dir;
  const std::string path = dir.file("spelled.bin");
  write_random(path, 1000, 9);
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
  EXPECT_THROW(sha256_of_file("/vsimem/does-not-exist"), Error);
}

// A read that fails part way (here: a directory opens, its read fails with EISDIR) stops the
// reading thread and is a source error naming the path, not a digest of what was read.
TEST(KeyDigest, ReadErrorIsASourceErrorNamingTheFile) {
  char pattern[] = "/tmp/idem-digest-dir-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  try {
    sha256_of_file(pattern);
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
