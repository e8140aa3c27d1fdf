// SPDX-License-Identifier: MIT
// Source identity by content: content digests of files, object-store headers, and the cache.
#include "key/source_digest.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "base/file_descriptor.hpp"
#include "base/file_identity.hpp"
#include "base/paths.hpp"
#include "base/sha256.hpp"
#include "cpl_conv.h"
#include "cpl_string.h"
#include "cpl_vsi.h"
#include "store/azure_blob.hpp"
#include "store/vsi_file.hpp"

namespace idem {

namespace {

// Large blocks keep the per-read overhead of /vsi files far below the hashing cost.
constexpr std::size_t k_read_block_size = std::size_t{4} * 1024 * 1024;

FileIdentity identity_from_stat(const struct stat& info) {
  FileIdentity identity;
  identity.device = static_cast<uint64_t>(info.st_dev);
  identity.inode = static_cast<uint64_t>(info.st_ino);
  identity.size = static_cast<int64_t>(info.st_size);
  identity.mtime_ns = mtime_ns_of(info);
  identity.ctime_ns = ctime_ns_of(info);
  return identity;
}

std::string errno_text(int error_number) {
  return std::strerror(error_number);
}

// A local source file opened for reading, with its stat in `info`; throws idem::Error(k_source)
// naming the file when it cannot be opened or is not a regular file.
FileDescriptor open_regular_file(const std::string& path, struct stat& info) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    throw Error(ErrorKind::k_source,
                "cannot open source file '" + path + "': " + errno_text(errno));
  }
  if (::fstat(fd.get(), &info) != 0) {
    throw Error(ErrorKind::k_source,
                "cannot stat source file '" + path + "': " + errno_text(errno));
  }
  if (!S_ISREG(info.st_mode)) {
    throw Error(ErrorKind::k_source, "source '" + path +
                                         "' is not a regular file (a directory, FIFO or device): "
                                         "name the raster file itself");
  }
  return fd;
}

// The content digest (docs/keys.md, "Source identity"): SHA-256 over the SHA-256 of each
// k_leaf_size piece. A single SHA-256 cannot use a second core; this one hashes pieces in parallel
// (bench/RESULTS.md has the figures) and
// gives the same value whatever the number of threads or the size of the reads.
constexpr std::size_t k_leaf_size = std::size_t{1024} * 1024;
constexpr std::size_t k_leaf_digest_size = 32;
constexpr unsigned char k_leaf_prefix = 0x00;
constexpr unsigned char k_root_prefix = 0x01;
constexpr unsigned k_max_hash_threads = 8;
// What the digest cache stores: the method, then the digest. A value cached by a version that
// computed another digest does not have it and is a miss.
const std::string k_cached_prefix = std::string(k_content_digest_method) + ":";

std::unique_ptr<Sha256> start_leaf() {
  auto hasher = std::make_unique<Sha256>();
  hasher->update(&k_leaf_prefix, 1);
  return hasher;
}

void finish_leaf(Sha256& hasher, unsigned char* digest) {
  unsigned char out[k_leaf_digest_size];
  hasher.finish(out);
  std::memcpy(digest, out, k_leaf_digest_size);
}

std::string root_hex(uint64_t size, const std::vector<unsigned char>& leaf_digests) {
  unsigned char size_bytes[8];
  for (int i = 0; i < 8; ++i) {
    size_bytes[i] = static_cast<unsigned char>(size >> (8 * (7 - i)));  // big-endian
  }
  Sha256 hasher;
  hasher.update(&k_root_prefix, 1);
  hasher.update(size_bytes, sizeof(size_bytes));
  hasher.update(leaf_digests.data(), leaf_digests.size());
  return hasher.finish_hex();
}

// The content digest of a stream read in blocks of any size.
class StreamingContentDigest {
 public:
  void update(const unsigned char* data, std::size_t size) {
    m_size += size;
    while (size > 0) {
      if (!m_leaf) {
        m_leaf = start_leaf();
        m_leaf_filled = 0;
      }
      const std::size_t take = std::min(size, k_leaf_size - m_leaf_filled);
      m_leaf->update(data, take);
      m_leaf_filled += take;
      data += take;
      size -= take;
      if (m_leaf_filled == k_leaf_size) {
        close_leaf();
      }
    }
  }
  std::string finish_hex() {
    if (m_leaf) {
      close_leaf();
    }
    return root_hex(m_size, m_leaf_digests);
  }

 private:
  void close_leaf() {
    m_leaf_digests.resize(m_leaf_digests.size() + k_leaf_digest_size);
    finish_leaf(*m_leaf, m_leaf_digests.data() + m_leaf_digests.size() - k_leaf_digest_size);
    m_leaf.reset();
  }
  uint64_t m_size = 0;
  std::unique_ptr<Sha256> m_leaf;  // the open leaf, holding m_leaf_filled bytes (never 0)
  std::size_t m_leaf_filled = 0;
  std::vector<unsigned char> m_leaf_digests;
};

// The content digest of an open regular file: each thread reads (pread) and hashes whole leaves,
// taking the next leaf number from a shared counter. The file's size is taken once, before; a
// file that ends early (truncated meanwhile) or cannot be read is a source error naming it.
class ParallelContentDigest {
 public:
  // `size`: the file's size when it was opened (open_regular_file).
  ParallelContentDigest(int fd, const std::string& path, int64_t size)
      : m_fd(fd), m_path(path), m_size(static_cast<uint64_t>(size)) {}

  std::string run() {
    m_leaf_count = (m_size + k_leaf_size - 1) / k_leaf_size;
    m_leaf_digests.assign(m_leaf_count * k_leaf_digest_size, 0);
    ::posix_fadvise(m_fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    const uint64_t helpers = std::min<uint64_t>(std::min(cores, k_max_hash_threads), m_leaf_count);
    std::vector<std::thread> threads;
    try {
      for (uint64_t i = 1; i < helpers; ++i) {
        threads.emplace_back([this] { hash_leaves(); });
      }
    } catch (const std::system_error&) {
      // No more threads: the ones started and this one do the work.
    }
    hash_leaves();
    for (auto& thread : threads) {
      thread.join();
    }
    if (!m_error.empty()) {
      throw Error(ErrorKind::k_source, m_error);
    }
    return root_hex(m_size, m_leaf_digests);
  }

 private:
  void hash_leaves() {
    std::unique_ptr<unsigned char[]> buffer;
    try {
      buffer.reset(new unsigned char[k_leaf_size]);
      for (;;) {
        const uint64_t leaf = m_next_leaf.fetch_add(1);
        if (leaf >= m_leaf_count || m_failed.load()) {
          return;
        }
        const uint64_t offset = leaf * k_leaf_size;
        const std::size_t size =
            static_cast<std::size_t>(std::min<uint64_t>(k_leaf_size, m_size - offset));
        std::size_t filled = 0;
        while (filled < size) {
          const ssize_t got = ::pread(m_fd, buffer.get() + filled, size - filled,
                                      static_cast<off_t>(offset + filled));
          if (got < 0 && errno == EINTR) {
            continue;
          }
          if (got < 0) {
            fail("cannot read source file '" + m_path + "': " + errno_text(errno));
            return;
          }
          if (got == 0) {
            fail("source file '" + m_path + "' became shorter while it was read (" +
                 std::to_string(offset + filled) + " of " + std::to_string(m_size) +
                 " bytes); run again once nothing writes to it");
            return;
          }
          filled += static_cast<std::size_t>(got);
        }
        const auto hasher = start_leaf();
        hasher->update(buffer.get(), size);
        finish_leaf(*hasher, m_leaf_digests.data() + leaf * k_leaf_digest_size);
      }
    } catch (const std::exception& error) {
      fail(std::string("cannot hash source file '") + m_path + "': " + error.what());
    }
  }

  void fail(const std::string& message) {
    std::lock_guard<std::mutex> lock(m_error_mutex);
    if (m_error.empty()) {
      m_error = message;
    }
    m_failed.store(true);
  }

  const int m_fd;
  const std::string m_path;
  const uint64_t m_size;
  uint64_t m_leaf_count = 0;
  std::vector<unsigned char> m_leaf_digests;  // leaf i at i * k_leaf_digest_size
  std::atomic<uint64_t> m_next_leaf{0};
  std::atomic<bool> m_failed{false};
  std::mutex m_error_mutex;
  std::string m_error;  // the first failure
};

std::string content_digest_of_vsi_file(const std::string& path) {
  const VsiFile file(VSIFOpenL(path.c_str(), "rb"));
  if (!file) {
    throw Error(ErrorKind::k_source, "cannot open source file '" + path + "'");
  }
  StreamingContentDigest digest;
  vsi_l_offset total = 0;
  const bool whole = read_vsi_chunks(file.get(), k_read_block_size,
                                     [&](const unsigned char* data, std::size_t size) {
                                       digest.update(data, size);
                                       total += size;
                                       return true;
                                     });
  // A deflated member of /vsizip/ or a /vsigzip/ file ends with a short read that does not set
  // the end-of-file flag (GDAL 3.6): it was read whole when every byte its size says was read.
  VSIStatBufL info;
  if (!whole &&
      !(VSIStatL(path.c_str(), &info) == 0 && static_cast<vsi_l_offset>(info.st_size) == total)) {
    throw Error(ErrorKind::k_source, "cannot read source file '" + path + "'");
  }
  return digest.finish_hex();
}

std::optional<std::string> cached_digest(DigestCache* cache, const std::string& path,
                                         const FileIdentity& identity) {
  if (cache == nullptr) {
    return std::nullopt;
  }
  auto value = cache->get(path, identity);
  if (!value || value->rfind(k_cached_prefix, 0) != 0) {
    return std::nullopt;
  }
  return value->substr(k_cached_prefix.size());
}

void cache_digest(DigestCache* cache, const std::string& path, const FileIdentity& identity,
                  const std::string& digest) {
  if (cache != nullptr) {
    cache->put(path, identity, k_cached_prefix + digest);
  }
}

ObjectHeaders required_object_headers(const std::string& path) {
  const ObjectLook look = look_at_object(path, false);
  if (look.found != ObjectLook::Found::k_object) {
    throw Error(ErrorKind::k_source,
                "cannot stat source object '" + path + "'" +
                    (look.found == ObjectLook::Found::k_unknown ? ": " + look.why : std::string()));
  }
  return look.headers;
}

}  // namespace

SourceDigestPolicy parse_source_digest_policy(const std::string& value) {
  if (EQUAL(value.c_str(), "AUTO")) {
    return SourceDigestPolicy::k_auto;
  }
  if (EQUAL(value.c_str(), "CONTENT")) {
    return SourceDigestPolicy::k_content;
  }
  if (EQUAL(value.c_str(), "ETAG")) {
    return SourceDigestPolicy::k_etag;
  }
  throw Error(ErrorKind::k_usage,
              "IDEM_SOURCE_DIGEST must be AUTO, CONTENT or ETAG, not '" + value + "'");
}

SourceDigestPolicy source_digest_policy_from_config() {
  const char* value = CPLGetConfigOption("IDEM_SOURCE_DIGEST", nullptr);
  if (value == nullptr || value[0] == '\0') {
    return SourceDigestPolicy::k_auto;
  }
  return parse_source_digest_policy(value);
}

FileIdentity local_file_identity(const std::string& path) {
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) {
    throw Error(ErrorKind::k_source,
                "cannot stat source file '" + path + "': " + errno_text(errno));
  }
  return identity_from_stat(info);
}

std::string content_digest_of_file(const std::string& path) {
  if (is_vsi_path(path)) {
    return content_digest_of_vsi_file(path);
  }
  struct stat info;
  const FileDescriptor fd = open_regular_file(path, info);
  return ParallelContentDigest(fd.get(), path, info.st_size).run();
}

// Nanoseconds after a file's last change within which a later write may leave its times as they
// are (docs/keys.md, "Digest cache"): two write() calls within one tick of the kernel's coarse
// clock, or a write through a memory mapping to a page already dirty, which updates no time until
// the page is written back (dirty_expire_centisecs + dirty_writeback_centisecs, 35 s by default)
// and faulted again. IDEM_DIGEST_RACY_SECONDS sets it (0: cache every digest).
int64_t racy_window_ns() {
  if (const char* value = CPLGetConfigOption("IDEM_DIGEST_RACY_SECONDS", nullptr);
      value != nullptr && value[0] != '\0') {
    char* end = nullptr;
    const double seconds = CPLStrtod(value, &end);
    if (end == value || *end != '\0' || !(seconds >= 0) || seconds > 86400 * 365) {
      throw Error(ErrorKind::k_usage, std::string("IDEM_DIGEST_RACY_SECONDS must be a number "
                                                  "of seconds from 0 to 31536000, not '") +
                                          value + "'");
    }
    return static_cast<int64_t>(seconds * 1e9);
  }
  static const int64_t from_kernel = [] {
    int64_t centiseconds = 0;
    for (const char* name :
         {"/proc/sys/vm/dirty_expire_centisecs", "/proc/sys/vm/dirty_writeback_centisecs"}) {
      FILE* file = std::fopen(name, "r");
      long long value = 0;
      if (file == nullptr || std::fscanf(file, "%lld", &value) != 1 || value < 0) {
        value = 3000;  // unknown: as long as the default expiry
      }
      if (file != nullptr) {
        std::fclose(file);
      }
      centiseconds += value;
    }
    return std::max<int64_t>(2'000'000'000, (centiseconds + 100) * 10'000'000);
  }();
  return from_kernel;
}

std::string digest_local_file(const std::string& path, DigestCache* cache, FileIdentity* read_as) {
  const int64_t window = racy_window_ns();
  struct timespec started {};
  ::clock_gettime(CLOCK_REALTIME, &started);
  struct stat info;
  const FileDescriptor fd = open_regular_file(path, info);
  const FileIdentity before = identity_from_stat(info);
  if (read_as != nullptr) {
    *read_as = before;
  }
  if (auto cached = cached_digest(cache, path, before)) {
    return *cached;
  }
  std::string digest = ParallelContentDigest(fd.get(), path, before.size).run();
  if (::fstat(fd.get(), &info) != 0 || !(identity_from_stat(info) == before)) {
    throw Error(ErrorKind::k_source, "the source file '" + path +
                                         "' changed while IDEM read it; run again once it is "
                                         "written");
  }
  // Git's "racy entry": a digest of a file changed within the window before the hash began
  // serves this key only, since a later write could leave the identity it is cached under as it
  // is.
  const int64_t started_ns = int64_t{started.tv_sec} * 1'000'000'000 + started.tv_nsec;
  if (std::max(before.mtime_ns, before.ctime_ns) < started_ns - window) {
    cache_digest(cache, path, before, digest);
  }
  return digest;
}

SourceDigest digest_source_file(const std::string& path, SourceDigestPolicy policy,
                                DigestCache* cache) {
  SourceDigest result;
  if (!is_object_store_path(path)) {
    result.method = k_content_digest_method;
    if (is_vsi_path(path)) {
      result.value = content_digest_of_vsi_file(path);
    } else {
      result.read_as.emplace();
      result.value = digest_local_file(path, cache, &*result.read_as);
    }
    return result;
  }
  const ObjectHeaders headers = required_object_headers(path);
  result.size = headers.size;
  if (policy != SourceDigestPolicy::k_content) {
    if (!headers.checksum_sha256.empty()) {
      result.method = "x-amz-checksum-sha256";
      result.value = headers.checksum_sha256;
      return result;
    }
    // Azure keeps the MD5 of a blob written in one request (Put Blob) and sends it with every
    // read, while its ETag changes with every write, identical bytes or not.
    if (!azure_blob_name(path).empty() && !headers.content_md5.empty()) {
      result.method = "content-md5";
      result.value = headers.content_md5;
      return result;
    }
    if (!headers.etag.empty()) {
      result.method = "etag";
      result.value = headers.etag;
      return result;
    }
    if (policy == SourceDigestPolicy::k_etag) {
      throw Error(ErrorKind::k_source,
                  "IDEM_SOURCE_DIGEST=ETAG but the object store sent neither "
                  "x-amz-checksum-sha256 nor ETag for '" +
                      path + "'");
    }
  }
  // Content: cached by URI + ETag + size (no inode for objects; see InMemoryDigestCache).
  FileIdentity identity;
  identity.size = headers.size;
  const std::string cache_path = path + "\netag:" + headers.etag;
  DigestCache* const object_cache = headers.etag.empty() ? nullptr : cache;
  result.method = k_content_digest_method;
  if (auto cached = cached_digest(object_cache, cache_path, identity)) {
    result.value = *cached;
    return result;
  }
  result.value = content_digest_of_vsi_file(path);
  cache_digest(object_cache, cache_path, identity, result.value);
  return result;
}

}  // namespace idem
