// SPDX-License-Identifier: MIT
// LeaseKeeper against a real SQLite ledger: the check right before publishing trusts a recent
// claim (no ledger write), renews an older one, and reports a claim that was taken over.
#include "work/lease.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ledger_test_support.hpp"

namespace idem {
namespace {

using namespace std::chrono_literals;
using ledger_test::make_request;

// The ledger as the keeper sees it, recording when each heartbeat (a renewal) went out: the tests
// wait for renewals as events and count them, instead of sleeping and reading lease ends.
class RecordingLedger final : public WorkerLedger {
 public:
  explicit RecordingLedger(WorkerLedger& inner) : m_inner(inner) {}

  bool heartbeat(const std::string& work_key, const std::string& claim_token,
                 std::chrono::seconds lease) override {
    const bool held = m_inner.heartbeat(work_key, claim_token, lease);
    std::lock_guard<std::mutex> lock(m_mutex);
    m_heartbeats.push_back(LeaseKeeper::Clock::now());
    m_changed.notify_all();
    return held;
  }
  size_t heartbeats() {
    std::lock_guard<std::mutex> lock(m_mutex);
    return m_heartbeats.size();
  }
  // When the `count`th heartbeat went out, once it has (bounded: a hang fails the test).
  std::optional<LeaseKeeper::Clock::time_point> wait_for_heartbeat(size_t count) {
    std::unique_lock<std::mutex> lock(m_mutex);
    if (!m_changed.wait_for(lock, 60s, [&] { return m_heartbeats.size() >= count; })) {
      return std::nullopt;
    }
    return m_heartbeats[count - 1];
  }

  std::string backend_name() const override { return m_inner.backend_name(); }
  bool has_footprints() override { return m_inner.has_footprints(); }
  ClaimResult claim(const ClaimRequest& request) override { return m_inner.claim(request); }
  bool complete(const std::string& work_key, const std::string& claim_token,
                const OutputFingerprint& fingerprint,
                std::optional<int64_t> feature_count) override {
    return m_inner.complete(work_key, claim_token, fingerprint, feature_count);
  }
  bool release(const std::string& work_key, const std::string& claim_token) override {
    return m_inner.release(work_key, claim_token);
  }
  LedgerRow lookup(const std::string& work_key) override { return m_inner.lookup(work_key); }
  std::vector<LedgerRow> rows_on_output(const std::string& output_uri, RowState state) override {
    return m_inner.rows_on_output(output_uri, state);
  }
  bool invalidate(const std::string& work_key, const std::string& observed_token) override {
    return m_inner.invalidate(work_key, observed_token);
  }
  bool replace_etag(const std::string& work_key, const std::string& observed_token,
                    const std::string& predicted, const std::string& store_etag) override {
    return m_inner.replace_etag(work_key, observed_token, predicted, store_etag);
  }
  DigestCache& digest_cache() override { return m_inner.digest_cache(); }

 private:
  WorkerLedger& m_inner;
  std::mutex m_mutex;
  std::condition_variable m_changed;
  std::vector<LeaseKeeper::Clock::time_point> m_heartbeats;
};

class LeaseKeeperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    m_dir = std::filesystem::temp_directory_path() /
            ("idem-lease-test-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(m_dir);
    std::filesystem::create_directories(m_dir);
    m_ledger = Ledger::open("sqlite:" + (m_dir / "ledger.sqlite").string());
    m_recording = std::make_unique<RecordingLedger>(*m_ledger);
  }
  void TearDown() override {
    m_recording.reset();
    m_ledger.reset();
    std::filesystem::remove_all(m_dir);
  }

  double lease_end(const std::string& key) { return *m_ledger->lookup(key).lease_expires_at; }

  // Claims `key`; a keeper given `held_since` renews at its first check, and trusts that renewal
  // at the next one (no second heartbeat).
  void expect_renewed_then_trusted(const std::string& key,
                                   std::optional<LeaseKeeper::Clock::time_point> held_since) {
    const ClaimRequest request = make_request(key, std::chrono::seconds(30));
    ASSERT_EQ(m_ledger->claim(request).outcome, ClaimOutcome::k_claimed);
    // No renewal thread: one started now would renew too, racing with the checks below.
    LeaseKeeper keeper(*m_recording, key, request.claim_token, request.lease, held_since,
                       LeaseKeeper::Start::k_when_work_is_long);
    EXPECT_TRUE(keeper.ensure_held());
    EXPECT_EQ(m_recording->heartbeats(), 1u);
    EXPECT_TRUE(keeper.ensure_held());
    EXPECT_EQ(m_recording->heartbeats(), 1u);
  }

  std::filesystem::path m_dir;
  std::unique_ptr<Ledger> m_ledger;
  std::unique_ptr<RecordingLedger> m_recording;
};

TEST_F(LeaseKeeperTest, RecentClaimIsTrustedWithoutALedgerWrite) {
  const ClaimRequest request = make_request("recent", 30s);
  const auto sent = LeaseKeeper::Clock::now();
  ASSERT_EQ(m_ledger->claim(request).outcome, ClaimOutcome::k_claimed);
  // No renewal thread (it could renew on its own schedule): the check alone decides.
  LeaseKeeper keeper(*m_recording, "recent", request.claim_token, request.lease, sent,
                     LeaseKeeper::Start::k_when_work_is_long);
  EXPECT_TRUE(keeper.ensure_held());
  EXPECT_EQ(m_recording->heartbeats(), 0u);
  EXPECT_FALSE(keeper.lost());
}

TEST_F(LeaseKeeperTest, OlderConfirmationIsRenewed) {
  // Claimed (as far as the keeper knows) more than a third of the lease ago.
  expect_renewed_then_trusted("older", LeaseKeeper::Clock::now() - 11s);
}

TEST_F(LeaseKeeperTest, UnknownClaimTimeIsRenewedUntilItsOwnRenewal) {
  expect_renewed_then_trusted("unknown", std::nullopt);
}

TEST_F(LeaseKeeperTest, ClaimTakenOverIsReportedLost) {
  const ClaimRequest first = make_request("taken", 30s);
  ASSERT_EQ(m_ledger->claim(first).outcome, ClaimOutcome::k_claimed);
  // The claim is given back and another worker takes the work.
  ASSERT_TRUE(m_ledger->release("taken", first.claim_token));
  const ClaimRequest second = make_request("taken", 30s);
  ASSERT_EQ(m_ledger->claim(second).outcome, ClaimOutcome::k_claimed);

  LeaseKeeper keeper(*m_ledger, "taken", first.claim_token, first.lease,
                     LeaseKeeper::Clock::now() - 11s);
  EXPECT_FALSE(keeper.ensure_held());
  EXPECT_TRUE(keeper.lost());
  // Once lost, even a recent confirmation is not trusted.
  EXPECT_FALSE(keeper.ensure_held());
  EXPECT_EQ(m_ledger->lookup("taken").claim_token, second.claim_token);
}

// A keeper that starts its thread when the work proves long: none before k_lazy_start, however
// often it is polled; the first poll after starts it. The work above was quick, so nothing
// renewed.
TEST_F(LeaseKeeperTest, LazyKeeperStartsItsThreadOnlyOnceTheWorkIsLong) {
  const ClaimRequest request = make_request("lazy", 30s);
  const auto sent = LeaseKeeper::Clock::now();
  ASSERT_EQ(m_ledger->claim(request).outcome, ClaimOutcome::k_claimed);
  LeaseKeeper keeper(*m_recording, "lazy", request.claim_token, request.lease, sent,
                     LeaseKeeper::Start::k_when_work_is_long);
  for (int i = 0; i < 10; ++i) {
    keeper.poll();
    EXPECT_FALSE(keeper.started());
  }
  // The time the work takes is what this test is about.
  std::this_thread::sleep_for(LeaseKeeper::k_lazy_start);
  keeper.poll();
  EXPECT_TRUE(keeper.started());
  EXPECT_TRUE(keeper.ensure_held());
  keeper.stop();
  EXPECT_EQ(m_recording->heartbeats(), 0u);
  EXPECT_FALSE(keeper.lost());

  // Stopped before it was needed: it never starts.
  LeaseKeeper quick(*m_ledger, "lazy", request.claim_token, request.lease, sent,
                    LeaseKeeper::Start::k_when_work_is_long);
  quick.stop();
  quick.start();
  EXPECT_FALSE(quick.started());
}

// A thread started late renews at once when its first renewal (a third of the lease after the
// claim) is already due, then every third of the lease.
TEST_F(LeaseKeeperTest, LateStartedThreadRenewsAtOnceWhenARenewalIsDue) {
  const ClaimRequest request = make_request("late", 3s);  // renewals due every second
  ASSERT_EQ(m_ledger->claim(request).outcome, ClaimOutcome::k_claimed);
  // Claimed (as far as the keeper knows) 1.5 s ago: the first renewal was due half a second ago.
  LeaseKeeper keeper(*m_recording, "late", request.claim_token, request.lease,
                     LeaseKeeper::Clock::now() - 1500ms, LeaseKeeper::Start::k_when_work_is_long);
  EXPECT_EQ(m_recording->heartbeats(), 0u);
  const auto started = LeaseKeeper::Clock::now();
  keeper.start();
  ASSERT_TRUE(keeper.started());
  const auto first = m_recording->wait_for_heartbeat(1);
  const auto second = m_recording->wait_for_heartbeat(2);
  ASSERT_TRUE(first && second);
  // The next renewal comes a third of the lease after the first (the schedule is the subject),
  // and the first came sooner than that after the start: at once, not on the schedule.
  EXPECT_GE(*second - *first, 1s - 50ms);
  EXPECT_LT(*first - started, *second - *first);
  EXPECT_GT(lease_end("late"), *m_ledger->lookup("late").claimed_at + 3.0);
  EXPECT_FALSE(keeper.lost());
}

}  // namespace
}  // namespace idem
