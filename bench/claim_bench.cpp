// SPDX-License-Identifier: MIT
// Claim latency at scale (run by bench/idem_bench.py scale, never as a timed test).
//   claim_bench DSN SAMPLES
// Claims SAMPLES fresh keys one after another through idem::Ledger (one process, one
// connection) and completes each, timing claim() and complete() separately. Run it against a
// ledger that already holds millions of rows. Prints one line of key=value results.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "ledger/ledger.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Stats {
  double median, p99, min, max;
};

Stats stats_of(std::vector<double> millis) {
  std::sort(millis.begin(), millis.end());
  return {millis[millis.size() / 2], millis[millis.size() * 99 / 100], millis.front(),
          millis.back()};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: claim_bench DSN SAMPLES" << std::endl;
    return 64;
  }
  try {
    auto ledger = idem::Ledger::open(argv[1]);
    const int samples = std::max(10, std::atoi(argv[2]));
    const std::string prefix = "claim-" + std::to_string(getpid()) + "-" +
                               std::to_string(Clock::now().time_since_epoch().count()) + "-";
    idem::OutputFingerprint fingerprint;
    fingerprint.size = 1048576;
    fingerprint.mtime_ns = 1700000000000000000;
    std::vector<double> claims, completes;
    for (int i = 0; i < samples + 100; ++i) {  // the first 100 warm the statements
      idem::ClaimRequest request;
      request.work_key = prefix + std::to_string(i);
      request.namespace_name = "bench";
      request.layer = "tiles";
      request.tile = idem::TileIndex{14, 8000 + i % 1000, 6000 + i / 1000};
      request.output_uri = "/bench/" + request.work_key + ".tif";
      request.work_json = R"({"bench":true,"resampling":"bilinear","t_srs":"EPSG:3857"})";
      request.claim_token = request.work_key + "-token";
      request.lease = std::chrono::seconds(300);
      request.worker_host = "bench";
      request.worker_pid = getpid();
      const auto start = Clock::now();
      const auto claim = ledger->claim(request);
      const auto claimed = Clock::now();
      const bool completed = claim.outcome == idem::ClaimOutcome::k_claimed &&
                             ledger->complete(request.work_key, request.claim_token, fingerprint);
      const auto done = Clock::now();
      if (!completed) {
        std::cerr << "claim_bench: unexpected claim/complete result" << std::endl;
        return 1;
      }
      if (i >= 100) {
        claims.push_back(std::chrono::duration<double, std::milli>(claimed - start).count());
        completes.push_back(std::chrono::duration<double, std::milli>(done - claimed).count());
      }
    }
    const Stats c = stats_of(claims);
    const Stats d = stats_of(completes);
    std::printf(
        "samples=%d claim_median_ms=%.4f claim_p99_ms=%.4f claim_min_ms=%.4f "
        "claim_max_ms=%.4f complete_median_ms=%.4f complete_p99_ms=%.4f "
        "complete_max_ms=%.4f\n",
        samples, c.median, c.p99, c.min, c.max, d.median, d.p99, d.max);
  } catch (const std::exception& error) {
    std::cerr << "claim_bench: " << error.what() << std::endl;
    return 2;
  }
  return 0;
}
