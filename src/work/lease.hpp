// SPDX-License-Identifier: MIT
// What every claimed piece of work shares (rasters through the driver, feature loads through
// `gdal-idem load`): attempt identity, the lease keeper that renews a claim while the work
// runs, and the pause points crash tests use.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "ledger/ledger.hpp"

namespace idem {

// A fresh claim token: 128 random bits as hex, unique per attempt.
std::string new_claim_token();
// This machine's host name, recorded with each claim (never in the key).
std::string worker_host_name();

// Crash tests stop a worker at a chosen step: IDEM_TEST_PAUSE_AT=<point> sleeps
// IDEM_TEST_PAUSE_SECONDS (default 30) when the worker reaches test_pause("<point>"), after
// saying so on stderr, so a test can kill -9 it exactly there; with IDEM_TEST_RESUME_FILE=<path>
// it goes on as soon as that file exists, and with IDEM_TEST_REACHED_FILE=<path> it creates that
// file on arrival. Several points separated by commas pause at each, with handshake files of
// their own (those names followed by "." and the point). Not for production use.
void test_pause(const char* point);

// The fenced completion of `key` under `token`, sent again on a new connection while the ledger
// cannot be reached (its database or pooler restarting): the work is done and published, and a
// completion is fenced and idempotent under its token (sent again after one that did commit, it
// answers true), so a restart of the database costs the work nothing. For up to a minute, or the
// lease if shorter; then LedgerUnreachable stands, and the claim is released (or runs out) and
// the retry does the work again. Returns WorkerLedger::complete()'s answer.
bool complete_through_reconnects(WorkerLedger& ledger, const std::string& key,
                                 const std::string& token, const OutputFingerprint& fingerprint,
                                 std::chrono::seconds lease,
                                 std::optional<int64_t> feature_count = std::nullopt);

// Renews a claim every third of its lease from a background thread. Once a renewal fails (the
// claim was taken over, or the ledger is unreachable) lost() stays true: the work's progress
// callback then returns FALSE and nothing is published.
//
// The thread can wait until the work proves long (Start::k_when_work_is_long): poll(), called
// from the work's progress callback and between its steps, starts it once the keeper is
// k_lazy_start old. Work done within that time (a tile) then runs without a second thread: a
// process that has one pays for it in every allocation and reference count from then on (a
// measurable part of a 256x256 tile, bench/RESULTS.md). The first renewal is due a third of a lease
// after the claim, so a thread started at any poll before then renews as one started at once would;
// only a single stretch without a poll longer than the whole lease (a read that hangs) lets the
// lease run out, and another worker then takes the work over. Renewals inline (ensure_held) are
// unchanged.
//
// `held_since` is a moment before the claim (or takeover) was sent: the ledger computed the
// lease's end from its own clock after it, so the claim is held at least until held_since +
// lease, and nobody can take it over before then. std::nullopt when unknown: ensure_held() then
// renews until a renewal of its own has succeeded.
class LeaseKeeper {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Start { k_now, k_when_work_is_long };
  static constexpr std::chrono::milliseconds k_lazy_start{1000};

  LeaseKeeper(WorkerLedger& ledger, std::string work_key, std::string token,
              std::chrono::seconds lease, std::optional<Clock::time_point> held_since,
              Start start = Start::k_now);
  ~LeaseKeeper();
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  bool lost() const { return m_lost.load(); }
  // Starts the renewal thread if the keeper is at least k_lazy_start old (cheap: a clock read
  // once the thread runs, nothing). Any thread may call it.
  void poll();
  // Starts the renewal thread now, if it is not running yet.
  void start();
  bool started() const { return m_started.load(); }
  void stop();
  // Renew now; false when the claim is gone.
  bool renew_now();
  // Right before publishing: true when the claim is held with at least two thirds of its lease
  // left. The last confirmation (the claim or a renewal) is trusted while it is younger than a
  // third of the lease, which saves a tile a ledger write; an older one is renewed now.
  bool ensure_held();
  // Whether the lease may have run out at some moment since the claim, even if renewed since
  // (the process was stopped, a renewal came too late): another worker may then have published
  // at the same output meanwhile, which the caller checks before it records its completion.
  bool lapsed() const;
  // A ProgressRelay check (base/progress.hpp) for the work done under this claim: the test pause
  // `pause_point` once half way, a poll(), and a stop once the claim is lost (reported with
  // `lost_message`).
  std::function<bool(double)> progress_check(const char* pause_point, const char* lost_message);

 private:
  void run();

  WorkerLedger& m_ledger;
  std::string m_work_key;
  std::string m_token;
  std::chrono::seconds m_lease;
  std::atomic<bool> m_lost{false};
  std::atomic<bool> m_lapsed{false};
  // When the claim or the last renewal that succeeded was sent (steady clock ticks, which also
  // run while the process is stopped); k_never when not known.
  static constexpr Clock::rep k_never = std::numeric_limits<Clock::rep>::min();
  std::atomic<Clock::rep> m_confirmed_at;
  Clock::time_point m_created = Clock::now();
  std::atomic<bool> m_started{false};
  std::mutex m_start_mutex;  // guards m_thread; never held while joining
  std::mutex m_mutex;
  std::condition_variable m_wake;
  bool m_stopping = false;
  std::thread m_thread;
};

}  // namespace idem
