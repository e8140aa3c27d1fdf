// SPDX-License-Identifier: MIT
// The PostgreSQL ledger through a server restart in the middle of a run: workers get clear
// errors (never the password), no row says completed for work that was not done, holds never
// overlap, and the run converges when retried, or rides through when workers retry with the
// same tokens. Restarts the test cluster, so ctest runs it alone (RUN_SERIAL).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "base/error.hpp"
#include "ledger/ledger.hpp"
#include "ledger_test_support.hpp"

namespace idem {
namespace {

using namespace std::chrono_literals;
using ledger_test::Child;
using ledger_test::pg_exec;
using ledger_test::split;

constexpr int k_keys = 300;
constexpr int k_workers = 4;

std::string dsn_value(const std::string& dsn, const std::string& keyword) {
  for (const std::string& word : split(dsn)) {
    if (word.rfind(keyword + "=", 0) == 0) {
      return word.substr(keyword.size() + 1);
    }
  }
  return "";
}

// "VERSION NAME" of the local cluster listening on `port` (pg_lsclusters).
std::string cluster_on_port(const std::string& port) {
  FILE* pipe = popen("pg_lsclusters -h", "r");
  if (pipe == nullptr) {
    return "";
  }
  char line[1024];
  std::string found;
  while (fgets(line, sizeof line, pipe) != nullptr) {
    const std::vector<std::string> words = split(line);
    if (words.size() >= 3 && words[2] == port) {
      found = words[0] + " " + words[1];
    }
  }
  pclose(pipe);
  return found;
}

class LedgerFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    IDEM_REQUIRE_PG_OR_SKIP();
    m_cluster = cluster_on_port(dsn_value(ledger_test::pg_base_dsn(), "port"));
    ASSERT_FALSE(m_cluster.empty()) << "no local cluster for the test DSN (pg_lsclusters)";
    m_lock = std::make_unique<ledger_test::PgTestLock>();
    ASSERT_TRUE(m_lock->ok());
    m_dsn = ledger_test::pg_dsn_for(ledger_test::k_gis_database);
    reset_schema();
  }

  void reset_schema() {
    auto admin = ledger_test::pg_connect(m_dsn);
    ASSERT_TRUE(admin);
    pg_exec(admin.get(), "SET client_min_messages = warning");
    pg_exec(admin.get(), "DROP SCHEMA IF EXISTS idem CASCADE");
    Ledger::open(m_dsn);
  }

  void restart_server() {
    const std::string command = "pg_ctlcluster " + m_cluster + " restart -m fast >/dev/null 2>&1";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  }

  std::unique_ptr<Ledger> open_when_up() {
    for (int i = 0; i < 100; ++i) {
      try {
        return Ledger::open(m_dsn);
      } catch (const Error&) {
        std::this_thread::sleep_for(100ms);
      }
    }
    return Ledger::open(m_dsn);
  }

  // Start the workers behind a barrier, release them once all are connected, restart the server
  // once `restart_after` keys are completed.
  std::vector<int> run_workers(const std::vector<std::string>& logs, bool tolerate,
                               std::optional<int> restart_after) {
    int barrier[2];
    EXPECT_EQ(pipe(barrier), 0);
    std::vector<std::unique_ptr<Child>> workers;
    for (const std::string& log : logs) {
      std::vector<std::string> args = {
          ledger_test::worker_path(), "race", m_dsn, log, std::to_string(barrier[0]),
          std::to_string(k_keys),     "1",    "20"};
      if (tolerate) {
        args.push_back("tolerate-errors");
      }
      workers.push_back(
          std::make_unique<Child>(args, std::map<std::string, std::string>{}, false, barrier[0]));
    }
    close(barrier[0]);
    const int ready_before = ledger_test::count_log_lines(logs, "ready");
    EXPECT_TRUE(ledger_test::wait_for_log_lines(logs, ready_before + static_cast<int>(logs.size()),
                                                "ready"))
        << "the workers did not all connect";
    close(barrier[1]);
    if (restart_after) {
      EXPECT_TRUE(ledger_test::wait_for_log_lines(logs, *restart_after, "complete", "ok"));
      restart_server();
    }
    std::vector<int> statuses;
    for (auto& worker : workers) {
      statuses.push_back(worker->wait());
    }
    return statuses;
  }

  std::vector<std::string> logs(const std::string& phase) {
    std::vector<std::string> paths;
    for (int i = 0; i < k_workers; ++i) {
      paths.push_back(m_dir.path() + "/" + phase + "-" + std::to_string(i) + ".log");
    }
    return paths;
  }

  void expect_clear_errors_without_password(const std::vector<std::string>& paths) {
    const std::string password = dsn_value(ledger_test::pg_base_dsn(), "password");
    int errors = 0;
    for (const std::string& path : paths) {
      std::ifstream log(path);
      std::string line;
      while (std::getline(log, line)) {
        if (line.rfind("error ", 0) != 0) {
          continue;
        }
        ++errors;
        EXPECT_NE(line.find("PostgreSQL ledger"), std::string::npos) << line;
        if (!password.empty()) {
          EXPECT_EQ(line.find(password), std::string::npos) << "password leaked: " << line;
        }
      }
    }
    EXPECT_GT(errors, 0) << "the restart did not hit the run";
  }

  ledger_test::TempDir m_dir;
  std::string m_cluster;
  std::string m_dsn;
  std::unique_ptr<ledger_test::PgTestLock> m_lock;
};

TEST_F(LedgerFaults, RunCutByRestartFailsClearlyAndConvergesWhenRetried) {
  const std::vector<std::string> first = logs("first");
  const std::vector<int> statuses = run_workers(first, false, k_keys / 10);
  EXPECT_NE(std::count(statuses.begin(), statuses.end(), 2), 0) << "no worker saw the restart";
  expect_clear_errors_without_password(first);
  auto ledger = open_when_up();
  // No row says completed for work that was not done.
  std::set<std::string> worked;
  for (const std::string& path : first) {
    std::ifstream log(path);
    std::string line;
    while (std::getline(log, line)) {
      const std::vector<std::string> words = split(line);
      if (words.size() >= 3 && words[0] == "work") {
        worked.insert(words[2]);
      }
    }
  }
  Ledger::RowFilter completed;
  completed.state = RowState::k_completed;
  const std::vector<LedgerRow> done = ledger->rows(completed);
  EXPECT_LT(done.size(), static_cast<size_t>(k_keys)) << "the restart came after the run";
  for (const LedgerRow& row : done) {
    EXPECT_EQ(worked.count(row.claim_token), 1U) << row.work_key;
  }
  // The retried run converges.
  std::vector<std::string> all = first;
  const std::vector<std::string> retry = logs("retry");
  all.insert(all.end(), retry.begin(), retry.end());
  for (int status : run_workers(retry, false, std::nullopt)) {
    EXPECT_EQ(status, 0);
  }
  const ledger_test::RaceReport report = ledger_test::check_race(all, k_keys, *ledger, true);
  std::cout << "cut run + retry: holds " << report.holds << ", errors " << report.errors
            << std::endl;
}

TEST_F(LedgerFaults, WorkersRetryingWithTheirTokensRideThroughARestart) {
  const std::vector<std::string> paths = logs("ride");
  for (int status : run_workers(paths, true, k_keys / 10)) {
    EXPECT_EQ(status, 0);
  }
  expect_clear_errors_without_password(paths);
  auto ledger = open_when_up();
  const ledger_test::RaceReport report = ledger_test::check_race(paths, k_keys, *ledger, true);
  std::cout << "ride through: holds " << report.holds << ", errors " << report.errors << std::endl;
}

}  // namespace
}  // namespace idem
