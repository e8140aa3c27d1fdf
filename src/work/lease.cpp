// SPDX-License-Identifier: MIT
// Attempt identity, the lease keeper and crash-test pause points (see lease.hpp).
#include "work/lease.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "base/error.hpp"
#include "base/random_token.hpp"
#include "cpl_conv.h"
#include "cpl_error.h"
#include "cpl_string.h"
#include "cpl_vsi.h"

namespace idem {

std::string new_claim_token() {
  return random_hex(32);
}

std::string worker_host_name() {
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0) {
    return "unknown";
  }
  return name;
}

void test_pause(const char* point) {
  const char* at = CPLGetConfigOption("IDEM_TEST_PAUSE_AT", nullptr);
  if (at == nullptr) {
    return;
  }
  // One point, or several separated by commas: then each point has its own handshake files,
  // the reached and resume files' names followed by "." and the point.
  const CPLStringList points(CSLTokenizeString2(at, ",", 0));
  if (points.FindString(point) < 0) {
    return;
  }
  const std::string suffix = points.size() > 1 ? std::string(".") + point : std::string();
  const double seconds = CPLAtof(CPLGetConfigOption("IDEM_TEST_PAUSE_SECONDS", "30"));
  const char* resume_option = CPLGetConfigOption("IDEM_TEST_RESUME_FILE", nullptr);
  const std::string resume = resume_option != nullptr ? resume_option + suffix : std::string();
  const char* resume_file = resume_option != nullptr ? resume.c_str() : nullptr;
  CPLError(CE_Warning, CPLE_AppDefined, "IDEM: test pause at %s for %.1f s", point, seconds);
  // With IDEM_TEST_REACHED_FILE the pause also says so by creating that file: the handshake of a
  // test that runs the worker in its own process (a thread, with thread-local options).
  if (const char* reached = CPLGetConfigOption("IDEM_TEST_REACHED_FILE", nullptr)) {
    if (VSILFILE* file = VSIFOpenL((reached + suffix).c_str(), "wb")) {
      VSIFCloseL(file);
    }
  }
  // With IDEM_TEST_RESUME_FILE the pause ends as soon as that file exists (a test's handshake),
  // the seconds bounding it only.
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  while (std::chrono::steady_clock::now() < until) {
    VSIStatBufL info;
    if (resume_file != nullptr && VSIStatL(resume_file, &info) == 0) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(resume_file != nullptr ? 5 : 50));
  }
}

bool complete_through_reconnects(WorkerLedger& ledger, const std::string& key,
                                 const std::string& token, const OutputFingerprint& fingerprint,
                                 std::chrono::seconds lease, std::optional<int64_t> feature_count) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::min(lease, std::chrono::seconds(60));
  auto pause = std::chrono::milliseconds(100);
  for (;;) {
    try {
      return ledger.complete(key, token, fingerprint, feature_count);
    } catch (const LedgerUnreachable& error) {
      if (std::chrono::steady_clock::now() + pause > deadline) {
        throw;
      }
      CPLDebug("IDEM", "completing again in %lld ms: %s", static_cast<long long>(pause.count()),
               error.what());
      std::this_thread::sleep_for(pause);  // a backoff before the next connection
      pause = std::min(pause * 2, std::chrono::milliseconds(2000));
    }
  }
}

LeaseKeeper::LeaseKeeper(WorkerLedger& ledger, std::string work_key, std::string token,
                         std::chrono::seconds lease, std::optional<Clock::time_point> held_since,
                         Start start_mode)
    : m_ledger(ledger),
      m_work_key(std::move(work_key)),
      m_token(std::move(token)),
      m_lease(lease),
      m_confirmed_at(held_since ? held_since->time_since_epoch().count() : k_never) {
  if (start_mode == Start::k_now) {
    start();
  }
}

LeaseKeeper::~LeaseKeeper() {
  stop();
}

void LeaseKeeper::poll() {
  if (!m_started.load(std::memory_order_relaxed) && Clock::now() - m_created >= k_lazy_start) {
    start();
  }
}

void LeaseKeeper::start() {
  std::lock_guard<std::mutex> lock(m_start_mutex);
  if (m_started.load()) {
    return;
  }
  {
    std::lock_guard<std::mutex> state(m_mutex);
    if (m_stopping) {
      return;
    }
  }
  CPLDebug("IDEM", "lease keeper: renewal thread started");
  m_thread = std::thread([this] { run(); });
  m_started = true;
}

void LeaseKeeper::stop() {
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_stopping = true;
  }
  m_wake.notify_all();
  std::thread thread;
  {
    std::lock_guard<std::mutex> lock(m_start_mutex);
    thread = std::move(m_thread);
  }
  if (thread.joinable()) {
    thread.join();
  }
}

bool LeaseKeeper::renew_now() {
  if (m_lost.load()) {
    return false;
  }
  const Clock::time_point sent = Clock::now();
  try {
    if (m_ledger.heartbeat(m_work_key, m_token, m_lease)) {
      const Clock::rep before = m_confirmed_at.exchange(sent.time_since_epoch().count());
      if (before == k_never || sent - Clock::time_point(Clock::duration(before)) >=
                                   std::chrono::duration_cast<Clock::duration>(m_lease)) {
        m_lapsed = true;  // renewed, but after a stretch in which the lease could run out
      }
    } else {
      m_lost = true;
    }
  } catch (const Error& error) {
    CPLDebug("IDEM", "heartbeat failed: %s", error.what());
    m_lost = true;
  }
  return !m_lost.load();
}

bool LeaseKeeper::lapsed() const {
  const Clock::rep confirmed_at = m_confirmed_at.load();
  return m_lapsed.load() || confirmed_at == k_never ||
         Clock::now() - Clock::time_point(Clock::duration(confirmed_at)) >=
             std::chrono::duration_cast<Clock::duration>(m_lease);
}

bool LeaseKeeper::ensure_held() {
  if (m_lost.load()) {
    return false;
  }
  const Clock::rep confirmed_at = m_confirmed_at.load();
  if (confirmed_at != k_never && Clock::now() - Clock::time_point(Clock::duration(confirmed_at)) <
                                     std::chrono::duration_cast<Clock::duration>(m_lease) / 3) {
    return true;
  }
  return renew_now();
}

void LeaseKeeper::run() {
  const auto interval = std::max<std::chrono::milliseconds>(
      std::chrono::milliseconds(500),
      std::chrono::duration_cast<std::chrono::milliseconds>(m_lease) / 3);
  std::unique_lock<std::mutex> lock(m_mutex);
  while (!m_stopping) {
    // Due a third of a lease after the last confirmation: a thread started late (lazily)
    // renews at once when that moment has passed.
    const Clock::rep confirmed_at = m_confirmed_at.load();
    const Clock::time_point due = confirmed_at == k_never
                                      ? Clock::now() + interval
                                      : Clock::time_point(Clock::duration(confirmed_at)) + interval;
    m_wake.wait_until(lock, due, [this] { return m_stopping; });
    if (m_stopping) {
      break;
    }
    lock.unlock();
    const bool held = renew_now();
    lock.lock();
    if (!held) {
      break;
    }
  }
}

std::function<bool(double)> LeaseKeeper::progress_check(const char* pause_point,
                                                        const char* lost_message) {
  return [this, pause_point, lost_message, paused = false](double complete) mutable {
    if (complete >= 0.5 && !paused) {
      paused = true;
      test_pause(pause_point);
    }
    poll();
    if (lost()) {
      CPLError(CE_Failure, CPLE_UserInterrupt, "%s", lost_message);
      return false;
    }
    return true;
  };
}

}  // namespace idem
