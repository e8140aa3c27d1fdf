// SPDX-License-Identifier: MIT
// Ledger benchmarks (run by bench/ledger.sh, never as timed tests).
//   ledger_bench init DSN                      open the ledger (applies the migrations)
//   ledger_bench pairs DSN WORKERS SECONDS     claim+complete pairs/s over WORKERS processes
//   ledger_bench lookup DSN ROWS SAMPLES       latency of lookup() of completed keys gen-1..ROWS
// Prints one line of key=value results.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "ledger/ledger.hpp"

namespace {

using Clock = std::chrono::steady_clock;

idem::ClaimRequest bench_request(const std::string& key) {
  idem::ClaimRequest request;
  request.work_key = key;
  request.namespace_name = "bench";
  request.layer = "tiles";
  request.output_uri = "/bench/" + key + ".tif";
  request.work_json = R"({"bench": true, "resampling": "bilinear", "t_srs": "EPSG 3857"})";
  request.claim_token = key + "-token";
  request.lease = std::chrono::seconds(300);
  request.worker_host = "bench";
  request.worker_pid = getpid();
  return request;
}

// One worker: wait for the barrier, then claim+complete fresh keys until the deadline.
int64_t pairs_worker(const std::string& dsn, int barrier_fd, double seconds) {
  auto ledger = idem::Ledger::open(dsn);
  char byte = 0;
  while (read(barrier_fd, &byte, 1) > 0) {
  }
  const std::string prefix = "bench-" + std::to_string(getpid()) + "-" +
                             std::to_string(Clock::now().time_since_epoch().count()) + "-";
  idem::OutputFingerprint fingerprint;
  fingerprint.size = 1048576;
  fingerprint.mtime_ns = 1700000000000000000;
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  int64_t pairs = 0;
  while (Clock::now() < deadline) {
    const idem::ClaimRequest request = bench_request(prefix + std::to_string(pairs));
    if (ledger->claim(request).outcome != idem::ClaimOutcome::k_claimed ||
        !ledger->complete(request.work_key, request.claim_token, fingerprint)) {
      std::cerr << "unexpected claim/complete result" << std::endl;
      return -1;
    }
    ++pairs;
  }
  return pairs;
}

int run_pairs(const std::string& dsn, int workers, double seconds) {
  int barrier[2];
  int results[2];
  if (pipe(barrier) != 0 || pipe(results) != 0) {
    return 1;
  }
  std::vector<pid_t> children;
  for (int i = 0; i < workers; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {
      close(barrier[1]);
      close(results[0]);
      const int64_t pairs = pairs_worker(dsn, barrier[0], seconds);
      if (write(results[1], &pairs, sizeof pairs) != sizeof pairs) {
        _exit(1);
      }
      _exit(pairs < 0 ? 1 : 0);
    }
    children.push_back(pid);
  }
  close(barrier[0]);
  close(results[1]);
  usleep(500000 + 20000 * workers);  // every worker connected
  const auto start = Clock::now();
  close(barrier[1]);
  int64_t total = 0;
  int64_t pairs = 0;
  while (read(results[0], &pairs, sizeof pairs) == sizeof pairs) {
    total += pairs < 0 ? 0 : pairs;
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  int failed = 0;
  for (pid_t child : children) {
    int status = 0;
    waitpid(child, &status, 0);
    failed += (WIFEXITED(status) && WEXITSTATUS(status) == 0) ? 0 : 1;
  }
  std::printf("workers=%d pairs=%lld seconds=%.3f pairs_per_second=%.1f failed=%d\n", workers,
              static_cast<long long>(total), elapsed, static_cast<double>(total) / elapsed, failed);
  return failed == 0 ? 0 : 1;
}

int run_lookup(const std::string& dsn, int64_t rows, int samples) {
  auto ledger = idem::Ledger::open(dsn);
  std::mt19937_64 generator(42);
  std::uniform_int_distribution<int64_t> pick(1, rows);
  std::vector<double> millis;
  for (int i = 0; i < 200; ++i) {  // warm the connection and the statements
    ledger->lookup("gen-" + std::to_string(pick(generator)));
  }
  int missing = 0;
  for (int i = 0; i < samples; ++i) {
    const std::string key = "gen-" + std::to_string(pick(generator));
    const auto start = Clock::now();
    const idem::LedgerRow row = ledger->lookup(key);
    millis.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    missing += row.state == idem::RowState::k_completed ? 0 : 1;
  }
  std::sort(millis.begin(), millis.end());
  std::printf(
      "rows=%lld samples=%d median_ms=%.4f p99_ms=%.4f min_ms=%.4f max_ms=%.4f "
      "not_completed=%d\n",
      static_cast<long long>(rows), samples, millis[millis.size() / 2],
      millis[millis.size() * 99 / 100], millis.front(), millis.back(), missing);
  return missing == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (args.size() == 2 && args[0] == "init") {
      auto ledger = idem::Ledger::open(args[1]);
      std::printf("backend=%s schema_version=%d\n", ledger->backend_name().c_str(),
                  ledger->schema_version());
      return 0;
    }
    if (args.size() == 4 && args[0] == "pairs") {
      return run_pairs(args[1], std::atoi(args[2].c_str()), std::atof(args[3].c_str()));
    }
    if (args.size() == 4 && args[0] == "lookup") {
      return run_lookup(args[1], std::atoll(args[2].c_str()), std::atoi(args[3].c_str()));
    }
  } catch (const std::exception& error) {
    std::cerr << "ledger_bench: " << error.what() << std::endl;
    return 2;
  }
  std::cerr << "usage: ledger_bench init|pairs|lookup ... (see the source)" << std::endl;
  return 64;
}
