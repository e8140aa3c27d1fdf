// SPDX-License-Identifier: MIT
// Multi-process ledger behaviour on real databases: eight workers racing on the same keys with
// short leases (takeovers happen, holds never overlap, one completion per key), a zombie worker
// stopped with SIGSTOP and resumed after a takeover, and workers with skewed clocks (libfaketime).
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cmath>

#include "ledger/ledger.hpp"
#include "ledger_test_support.hpp"

namespace idem {
namespace {

using namespace std::chrono_literals;
using ledger_test::Child;
using ledger_test::make_fingerprint;
using ledger_test::make_request;
using ledger_test::pg_exec;
using ledger_test::split;

class LedgerProcesses : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(ledger_test::worker_path())) << ledger_test::worker_path();
    if (GetParam() == "sqlite") {
      m_dsn = "sqlite:" + m_dir.path() + "/ledger.sqlite";
    } else {
      IDEM_REQUIRE_PG_OR_SKIP();
      m_lock = std::make_unique<ledger_test::PgTestLock>();
      ASSERT_TRUE(m_lock->ok());
      m_dsn = ledger_test::pg_dsn_for(ledger_test::k_gis_database);
      auto admin = ledger_test::pg_connect(m_dsn);
      ASSERT_TRUE(admin);
      pg_exec(admin.get(), "SET client_min_messages = warning");
      pg_exec(admin.get(), "DROP SCHEMA IF EXISTS idem CASCADE");
    }
    m_ledger = Ledger::open(m_dsn);  // migrated before the workers start
  }

  // Ends the lease of `key` now, on the ledger's own clock, as its running out would.
  void end_lease(const std::string& key) {
    const std::string update = " SET lease_expires_at = claimed_at WHERE work_key = '" + key + "'";
    if (GetParam() == "sqlite") {
      sqlite3* db = nullptr;
      ASSERT_EQ(sqlite3_open((m_dir.path() + "/ledger.sqlite").c_str(), &db), SQLITE_OK);
      sqlite3_busy_timeout(db, 30000);
      EXPECT_EQ(sqlite3_exec(db, ("UPDATE ledger" + update).c_str(), nullptr, nullptr, nullptr),
                SQLITE_OK);
      EXPECT_EQ(sqlite3_changes(db), 1);
      sqlite3_close(db);
    } else {
      auto admin = ledger_test::pg_connect(m_dsn);
      ASSERT_TRUE(admin);
      pg_exec(admin.get(), "UPDATE idem.ledger" + update);
    }
  }

  ledger_test::TempDir m_dir;
  std::string m_dsn;
  std::unique_ptr<ledger_test::PgTestLock> m_lock;
  std::unique_ptr<Ledger> m_ledger;
};

TEST_P(LedgerProcesses, EightWorkersCompleteEveryKeyExactlyOnceWithoutOverlap) {
  constexpr int k_workers = 8;
  constexpr int k_keys = 1000;
  int barrier[2];
  ASSERT_EQ(pipe(barrier), 0);
  std::vector<std::string> logs;
  std::vector<std::unique_ptr<Child>> workers;
  for (int i = 0; i < k_workers; ++i) {
    logs.push_back(m_dir.path() + "/worker-" + std::to_string(i) + ".log");
    workers.push_back(std::make_unique<Child>(
        std::vector<std::string>{ledger_test::worker_path(), "race", m_dsn, logs.back(),
                                 std::to_string(barrier[0]), std::to_string(k_keys), "1", "0"},
        std::map<std::string, std::string>{}, false, barrier[0]));
  }
  close(barrier[0]);
  // Every worker connected and waiting, then released together.
  EXPECT_TRUE(ledger_test::wait_for_log_lines(logs, k_workers, "ready"));
  close(barrier[1]);
  for (auto& worker : workers) {
    EXPECT_EQ(worker->wait(), 0);
  }
  const ledger_test::RaceReport report = ledger_test::check_race(logs, k_keys, *m_ledger);
  EXPECT_GE(report.holds, k_keys);
  EXPECT_GT(report.takeovers, 0) << "no lease expired: the race did not test takeovers";
  EXPECT_EQ(report.errors, 0);
  std::cout << "holds " << report.holds << ", takeovers " << report.takeovers
            << ", refused stale operations " << report.lost << std::endl;
}

TEST_P(LedgerProcesses, ZombieWorkerResumedAfterTakeoverChangesNothing) {
  Child zombie({ledger_test::worker_path(), "hold", m_dsn, "zombie", "1"}, {}, true);
  const std::vector<std::string> claimed = split(zombie.read_line());
  ASSERT_EQ(claimed.size(), 3U);
  ASSERT_EQ(claimed[0], "claimed");
  ASSERT_EQ(kill(zombie.pid(), SIGSTOP), 0);
  // Its lease ends on the ledger's clock (the zombie is fenced by its token, whatever its own
  // clock says).
  end_lease("zombie");

  const ClaimRequest takeover = make_request("zombie", 60s, "/out/zombie.tif");
  const ClaimResult result = m_ledger->claim(takeover);
  ASSERT_EQ(result.outcome, ClaimOutcome::k_claimed);
  EXPECT_EQ(result.attempt, 2);
  ASSERT_TRUE(m_ledger->complete("zombie", takeover.claim_token, make_fingerprint(7)));

  ASSERT_EQ(kill(zombie.pid(), SIGCONT), 0);
  zombie.write_line("go");
  EXPECT_EQ(zombie.read_line(), "heartbeat 0");
  EXPECT_EQ(zombie.read_line(), "complete 0");
  EXPECT_EQ(zombie.wait(), 0);
  const LedgerRow row = m_ledger->lookup("zombie");
  EXPECT_EQ(row.state, RowState::k_completed);
  EXPECT_EQ(row.claim_token, takeover.claim_token);
  EXPECT_EQ(row.fingerprint->size, 7);
  EXPECT_EQ(row.attempt, 2);
}

INSTANTIATE_TEST_SUITE_P(Backends, LedgerProcesses, ::testing::Values("sqlite", "postgresql"),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           return param_info.param;
                         });

// With PostgreSQL every time is the server's: a worker whose clock is five hours off neither
// steals a live claim nor has its own claim stolen early. (An SQLite ledger lives on one machine
// whose clock its processes share; a process-local fake clock is outside its contract.)
TEST_P(LedgerProcesses, SkewedWorkerClocksDoNotChangeLeases) {
  if (GetParam() == "sqlite") {
    GTEST_SKIP() << "the SQLite ledger's clock is the host's";
  }
  const std::optional<std::string> faketime = ledger_test::libfaketime_path();
  ASSERT_TRUE(faketime) << "libfaketime is not installed (apt-get install libfaketime)";
  const ClaimRequest live = make_request("skew-live", 30s);
  ASSERT_EQ(m_ledger->claim(live).outcome, ClaimOutcome::k_claimed);
  for (const char* offset : {"+5h", "-5h"}) {
    const std::map<std::string, std::string> env = {
        {"LD_PRELOAD", *faketime}, {"FAKETIME", offset}, {"FAKETIME_DONT_RESET", "1"}};
    // The skewed worker cannot steal the live claim...
    Child thief({ledger_test::worker_path(), "try", m_dsn, "skew-live", "30"}, env, true);
    const std::vector<std::string> stolen = split(thief.read_line());
    ASSERT_EQ(stolen.size(), 4U) << offset;
    EXPECT_EQ(stolen[0], "busy") << offset;
    EXPECT_NEAR(std::stod(stolen[1]), 30.0, 5.0) << offset;
    const double skew = std::stod(stolen[2]) - static_cast<double>(time(nullptr));
    EXPECT_NEAR(std::fabs(skew), 5 * 3600.0, 120.0) << "faketime did not skew the worker";
    EXPECT_EQ(thief.wait(), 0);
    // ...and its own claim keeps its full lease in the database's time.
    const std::string key = std::string("skew-own") + offset;
    Child owner({ledger_test::worker_path(), "try", m_dsn, key, "30"}, env, true);
    const std::vector<std::string> owned = split(owner.read_line());
    ASSERT_EQ(owned.size(), 4U);
    EXPECT_EQ(owned[0], "claimed") << offset;
    EXPECT_EQ(owner.wait(), 0);
    const ClaimResult other = m_ledger->claim(make_request(key, 30s));
    EXPECT_EQ(other.outcome, ClaimOutcome::k_busy) << offset;
    ASSERT_TRUE(other.row.lease_left_seconds);
    EXPECT_NEAR(*other.row.lease_left_seconds, 30.0, 5.0) << offset;
    EXPECT_NEAR(*other.row.claimed_at, m_ledger->now(), 5.0) << offset;
  }
}

}  // namespace
}  // namespace idem
