// LeaseKeeper against a real SQLite ledger: the check right before publishing trusts a recent
// claim (no ledger write), renews an older one, and reports a claim that was taken over.
#include "work/lease.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "ledger_test_support.hpp"

namespace idem {
namespace {

using namespace std::chrono_literals;
using ledger_test::make_request;

class LeaseKeeperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    m_dir = std::filesystem::temp_directory_path() /
            ("idem-lease-test-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(m_dir);
    std::filesystem::create_directories(m_dir);
    m_ledger = Ledger::open("sqlite:" + (m_dir / "ledger.sqlite").string());
  }
  void TearDown() override {
    m_ledger.reset();
    std::filesystem::remove_all(m_dir);
  }

  double lease_end(const std::string& key) { return *m_ledger->lookup(key).lease_expires_at; }

  // Claims `key`; a keeper given `held_since` renews at its first check, and trusts that renewal
  // at the next one (the lease's end does not move again).
  void expect_renewed_then_trusted(const std::string& key,
                                   std::optional<LeaseKeeper::Clock::time_point> held_since) {
    const ClaimRequest request = make_request(key, std::chrono::seconds(30));
    ASSERT_EQ(m_ledger->claim(request).outcome, ClaimOutcome::k_claimed);
    const double before = lease_end(key);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    // No renewal thread: one started now would renew too, racing with the checks below.
    LeaseKeeper keeper(*m_ledger, key, request.claim_token, request.lease, held_since,
                       LeaseKeeper::Start::k_when_work_is_long);
    EXPECT_TRUE(keeper.ensure_held());
    EXPECT_GT(lease_end(key), before);
    const double renewed = lease_end(key);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_TRUE(keeper.ensure_held());
    EXPECT_EQ(lease_end(key), renewed);
  }

  std::filesystem::path m_dir;
  std::unique_ptr<Ledger> m_ledger;
};

TEST_F(LeaseKeeperTest, RecentClaimIsTrustedWithoutALedgerWrite) {
  const ClaimRequest request = make_request("recent", 30s);
  const auto sent = LeaseKeeper::Clock::now();
  ASSERT_EQ(m_ledger->claim(request).outcome, ClaimOutcome::k_claimed);
  const double before = lease_end("recent");
  LeaseKeeper keeper(*m_ledger, "recent", request.claim_token, request.lease, sent);
  std::this_thread::sleep_for(20ms);  // a renewal now would move the lease's end
  EXPECT_TRUE(keeper.ensure_held());
  EXPECT_EQ(lease_end("recent"), before);
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
  const double before = lease_end("lazy");
  LeaseKeeper keeper(*m_ledger, "lazy", request.claim_token, request.lease, sent,
                     LeaseKeeper::Start::k_when_work_is_long);
  for (int i = 0; i < 10; ++i) {
    keeper.poll();
    EXPECT_FALSE(keeper.started());
    std::this_thread::sleep_for(20ms);
  }
  std::this_thread::sleep_for(LeaseKeeper::k_lazy_start);
  keeper.poll();
  EXPECT_TRUE(keeper.started());
  EXPECT_TRUE(keeper.ensure_held());
  keeper.stop();
  EXPECT_EQ(lease_end("lazy"), before);
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
  const auto sent = LeaseKeeper::Clock::now();
  ASSERT_EQ(m_ledger->claim(request).outcome, ClaimOutcome::k_claimed);
  const double claimed_end = lease_end("late");
  LeaseKeeper keeper(*m_ledger, "late", request.claim_token, request.lease, sent,
                     LeaseKeeper::Start::k_when_work_is_long);
  std::this_thread::sleep_for(1500ms);  // past the first renewal's moment, nothing renewed yet
  EXPECT_EQ(lease_end("late"), claimed_end);
  keeper.poll();
  ASSERT_TRUE(keeper.started());
  std::this_thread::sleep_for(300ms);
  const double renewed_end = lease_end("late");
  EXPECT_GT(renewed_end, claimed_end + 1.0);
  std::this_thread::sleep_for(1200ms);  // the next one, a second after that renewal
  EXPECT_GT(lease_end("late"), renewed_end + 0.5);
  EXPECT_FALSE(keeper.lost());
}

}  // namespace
}  // namespace idem
