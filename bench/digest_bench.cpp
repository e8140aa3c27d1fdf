// SPDX-License-Identifier: MIT
// Source digest benchmarks: the content digest of a large file (compare with `openssl dgst
// -sha256`, bench/digest.sh) and a digest-cache hit on the same file.
// IDEM_BENCH_FILE names the file (default /tmp/idem-digest-bench.bin, 1 GiB, created if absent).
#include <benchmark/benchmark.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "key/source_digest.hpp"

namespace {

std::string bench_file() {
  const char* configured = std::getenv("IDEM_BENCH_FILE");
  const std::string path = configured != nullptr ? configured : "/tmp/idem-digest-bench.bin";
  struct stat info;
  if (::stat(path.c_str(), &info) != 0) {
    // 1 GiB of pseudo-random bytes, written once.
    std::ofstream out(path, std::ios::binary);
    std::mt19937_64 engine(1);
    std::vector<unsigned long long> block(1 << 17);  // 1 MiB
    for (int i = 0; i < 1024; ++i) {
      for (auto& word : block) {
        word = engine();
      }
      out.write(reinterpret_cast<const char*>(block.data()),
                static_cast<std::streamsize>(block.size() * sizeof(block[0])));
    }
  }
  return path;
}

void bm_sha256_file(benchmark::State& state) {
  const std::string path = bench_file();
  struct stat info;
  ::stat(path.c_str(), &info);
  for (auto _ : state) {
    benchmark::DoNotOptimize(idem::content_digest_of_file(path));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * info.st_size);
}
BENCHMARK(bm_sha256_file)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);

void bm_digest_cache_hit(benchmark::State& state) {
  const std::string path = bench_file();
  idem::InMemoryDigestCache cache;
  idem::digest_local_file(path, &cache);  // warm: one full hash
  for (auto _ : state) {
    benchmark::DoNotOptimize(idem::digest_local_file(path, &cache));
  }
}
BENCHMARK(bm_digest_cache_hit)->Unit(benchmark::kMicrosecond)->UseRealTime()->Repetitions(3);

}  // namespace

BENCHMARK_MAIN();
