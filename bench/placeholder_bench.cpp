// Placeholder so the bench directory builds until the real benchmarks land.
#include <benchmark/benchmark.h>

static void bm_noop(benchmark::State& state) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(0);
  }
}
BENCHMARK(bm_noop);
BENCHMARK_MAIN();
