// SPDX-License-Identifier: MIT
// The claim loop that raster work (the IDEM driver) and feature loads (gdal-idem load) share:
// claim the work unless it is completed; run it when claimed; return what is there when
// completed; while another worker holds it, say so (or fail, IDEM_ON_BUSY=FAIL) and claim again
// after a back-off.
#pragma once

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include "ledger/ledger.hpp"

namespace idem {

// "host pid N (attempt A, lease left S s)": the worker that holds a claim, as messages name it.
inline std::string describe_holder(const LedgerRow& holder) {
  return holder.worker_host + " pid " + std::to_string(holder.worker_pid) + " (attempt " +
         std::to_string(holder.attempt) + ", lease left " +
         std::to_string(static_cast<long>(holder.lease_left_seconds.value_or(0))) + " s)";
}

// The pause between two looks at work another worker holds: from 50 ms, doubling to 1 s, so
// short tiles finish within a few polls and long work costs the ledger one look a second; never
// past the holder's lease, when the work may be taken over.
class BusyBackoff {
 public:
  void wait(const LedgerRow& holder) {
    const double left = holder.lease_left_seconds.value_or(1.0);
    const double pause = std::clamp(std::min(m_next, left), 0.05, 1.0);
    m_next = std::min(m_next * 2, 1.0);
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int>(pause * 1000)));
  }

 private:
  double m_next = 0.05;  // seconds
};

// Runs the loop: `claim()` makes one claim (a ClaimResult, with a new token each time);
// `claimed(result)` runs the claimed work and returns what the loop returns; `completed(result)`
// returns it for completed work, or nullopt when the completion was withdrawn (the work is
// claimed again); `busy(holder)` is told of the worker that holds the work before each back-off
// (it may throw, to fail instead of waiting).
template <typename Claim, typename Claimed, typename Completed, typename Busy>
auto run_claim_loop(Claim&& claim, Claimed&& claimed, Completed&& completed, Busy&& busy)
    -> decltype(claimed(claim())) {
  BusyBackoff backoff;
  for (;;) {
    const ClaimResult result = claim();
    if (result.outcome == ClaimOutcome::k_claimed) {
      return claimed(result);
    }
    if (result.outcome == ClaimOutcome::k_completed) {
      if (auto done = completed(result)) {
        return *std::move(done);
      }
      continue;
    }
    busy(result.row);
    backoff.wait(result.row);
  }
}

}  // namespace idem
