// SPDX-License-Identifier: MIT
// Shared by the ledger tests: which backends to run against, a fresh ledger per test (a new
// SQLite file; a dropped and re-migrated `idem` schema in a dedicated PostgreSQL database), and a
// cross-process lock so PostgreSQL tests run by `ctest -j` do not trample each other.
#pragma once

#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ledger/ledger.hpp"

namespace idem::ledger_test {

struct PgCloser {
  void operator()(PGconn* connection) const { PQfinish(connection); }
};
using PgHandle = std::unique_ptr<PGconn, PgCloser>;

inline std::string pg_base_dsn() {
  const char* dsn = std::getenv("IDEM_TEST_PG_DSN");
  return dsn != nullptr ? dsn : "";
}

inline bool pg_required() {
  const char* required = std::getenv("IDEM_TEST_REQUIRE_PG");
  return required != nullptr && std::string(required) == "1";
}

// In a test or SetUp(): without a PostgreSQL DSN, fail when one is required
// (IDEM_TEST_REQUIRE_PG=1, as under scripts/with-postgres), else skip.
#define IDEM_REQUIRE_PG_OR_SKIP()                                           \
  do {                                                                      \
    if (ledger_test::pg_base_dsn().empty()) {                               \
      if (ledger_test::pg_required()) {                                     \
        FAIL() << "IDEM_TEST_REQUIRE_PG=1 but IDEM_TEST_PG_DSN is not set"; \
      }                                                                     \
      GTEST_SKIP() << "no PostgreSQL (run under scripts/with-postgres)";    \
    }                                                                       \
  } while (false)

// The test DSN pointed at another database of the same cluster (keyword strings: last wins).
inline std::string pg_dsn_for(const std::string& database) {
  return pg_base_dsn() + " dbname=" + database;
}

inline PgHandle pg_connect(const std::string& dsn) {
  PgHandle connection(PQconnectdb(dsn.c_str()));
  if (PQstatus(connection.get()) != CONNECTION_OK) {
    ADD_FAILURE() << "cannot connect to the test PostgreSQL: " << PQerrorMessage(connection.get());
    return nullptr;
  }
  return connection;
}

// Run SQL (no parameters: test setup only); returns the first value of the first row or "".
inline std::string pg_exec(PGconn* connection, const std::string& sql, bool tolerate = false) {
  PGresult* result = PQexec(connection, sql.c_str());
  const ExecStatusType status = PQresultStatus(result);
  std::string value;
  if (status == PGRES_TUPLES_OK && PQntuples(result) > 0) {
    value = PQgetvalue(result, 0, 0);
  } else if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK && !tolerate) {
    ADD_FAILURE() << "SQL failed: " << sql << ": " << PQresultErrorMessage(result);
  }
  PQclear(result);
  return value;
}

inline constexpr const char* k_gis_database = "idem_ledger_test_gis";
inline constexpr const char* k_nogis_database = "idem_ledger_test_nogis";

// Holds a session advisory lock on the base database for the life of a PostgreSQL test and
// makes sure the two test databases exist (one with PostGIS, one without).
class PgTestLock {
 public:
  PgTestLock() {
    m_connection = pg_connect(pg_base_dsn());
    if (!m_connection) {
      return;
    }
    pg_exec(m_connection.get(), "SET client_min_messages = warning");
    pg_exec(m_connection.get(), "SELECT pg_advisory_lock(4242003001)");
    for (const char* database : {k_gis_database, k_nogis_database}) {
      const std::string exists = pg_exec(
          m_connection.get(),
          std::string("SELECT count(*) FROM pg_database WHERE datname = '") + database + "'");
      if (exists == "0") {
        pg_exec(m_connection.get(), std::string("CREATE DATABASE ") + database);
      }
    }
    PgHandle gis = pg_connect(pg_dsn_for(k_gis_database));
    if (gis) {
      pg_exec(gis.get(), "SET client_min_messages = warning");
      pg_exec(gis.get(), "CREATE EXTENSION IF NOT EXISTS postgis");
    }
  }
  bool ok() const { return m_connection != nullptr; }

 private:
  PgHandle m_connection;  // the lock goes with the session
};

inline std::string random_token() {
  static thread_local std::mt19937_64 generator(std::random_device{}() ^
                                                static_cast<uint64_t>(getpid()));
  static const char* digits = "0123456789abcdef";
  std::string token;
  for (int i = 0; i < 32; ++i) {
    token += digits[generator() % 16];
  }
  return token;
}

inline ClaimRequest make_request(const std::string& key, std::chrono::seconds lease,
                                 const std::string& output_uri = "") {
  ClaimRequest request;
  request.work_key = key;
  request.namespace_name = "test";
  request.output_uri = output_uri.empty() ? "/data/out/" + key + ".tif" : output_uri;
  request.work_json = "{\"key\":\"" + key + "\"}";
  request.claim_token = random_token();
  request.lease = lease;
  request.worker_host = "testhost";
  request.worker_pid = getpid();
  return request;
}

inline OutputFingerprint make_fingerprint(int64_t size) {
  OutputFingerprint fingerprint;
  fingerprint.size = size;
  fingerprint.mtime_ns = 1700000000123456789;
  return fingerprint;
}

// A private scratch directory, removed at scope exit.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "idem-ledger-XXXXXX").string();
    m_path = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(m_path, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return m_path; }

 private:
  std::string m_path;
};

}  // namespace idem::ledger_test

// ---- Child processes (the worker tool) ----------------------------------------------------

namespace idem::ledger_test {

// The worker tool, built next to the test binaries (src/tests/tools/ledger_worker.cpp).
inline std::string worker_path() {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "ledger_worker").string();
}

// A child process with optional pipes to its stdin and from its stdout. Killed if still running
// at scope exit.
class Child {
 public:
  Child(const std::vector<std::string>& args, const std::map<std::string, std::string>& env = {},
        bool pipes = false, int inherit_fd = -1) {
    int in_pipe[2] = {-1, -1};
    int out_pipe[2] = {-1, -1};
    if (pipes && (pipe(in_pipe) != 0 || pipe(out_pipe) != 0)) {
      ADD_FAILURE() << "pipe failed";
      return;
    }
    m_pid = fork();
    if (m_pid == 0) {
      if (pipes) {
        dup2(in_pipe[0], 0);
        dup2(out_pipe[1], 1);
        close(in_pipe[1]);
        close(out_pipe[0]);
      }
      for (const auto& [name, value] : env) {
        setenv(name.c_str(), value.c_str(), 1);
      }
      // Close every other descriptor except the barrier, so barriers see EOF when they should.
      for (int fd = 3; fd < 1024; ++fd) {
        if (fd != inherit_fd && !(pipes && (fd == in_pipe[0] || fd == out_pipe[1]))) {
          close(fd);
        }
      }
      std::vector<char*> argv;
      for (const std::string& arg : args) {
        argv.push_back(const_cast<char*>(arg.c_str()));
      }
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    if (pipes) {
      close(in_pipe[0]);
      close(out_pipe[1]);
      m_stdin = fdopen(in_pipe[1], "w");
      m_stdout = fdopen(out_pipe[0], "r");
    }
  }
  ~Child() {
    if (m_stdin != nullptr) {
      fclose(m_stdin);
    }
    if (m_stdout != nullptr) {
      fclose(m_stdout);
    }
    if (m_pid > 0 && !m_reaped) {
      kill(m_pid, SIGKILL);
      waitpid(m_pid, nullptr, 0);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return m_pid; }
  std::string read_line() {
    char buffer[4096];
    if (m_stdout == nullptr || fgets(buffer, sizeof buffer, m_stdout) == nullptr) {
      return "";
    }
    std::string line = buffer;
    if (!line.empty() && line.back() == '\n') {
      line.pop_back();
    }
    return line;
  }
  void write_line(const std::string& line) {
    std::fputs((line + "\n").c_str(), m_stdin);
    std::fflush(m_stdin);
  }
  // Exit status (or -signal).
  int wait() {
    int status = 0;
    waitpid(m_pid, &status, 0);
    m_reaped = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  }

 private:
  pid_t m_pid = -1;
  bool m_reaped = false;
  FILE* m_stdin = nullptr;
  FILE* m_stdout = nullptr;
};

inline std::vector<std::string> split(const std::string& line) {
  std::istringstream stream(line);
  std::vector<std::string> words;
  std::string word;
  while (stream >> word) {
    words.push_back(word);
  }
  return words;
}

}  // namespace idem::ledger_test

namespace idem::ledger_test {

// What the race workers' logs say, checked against the ledger.
struct RaceReport {
  int holds = 0;
  int takeovers = 0;  // claims with attempt > 1
  int lost = 0;       // heartbeats or completions refused to a stale holder
  int errors = 0;     // ledger errors the workers saw (fault tests)
};

// How many lines of the workers' logs begin with `word` (and, when set, have `status` as their
// fourth word: "complete KEY TOKEN ok ...").
inline int count_log_lines(const std::vector<std::string>& log_paths, const std::string& word,
                           const std::string& status = "") {
  int count = 0;
  for (const std::string& path : log_paths) {
    std::ifstream log(path);
    std::string line;
    while (std::getline(log, line)) {
      const std::vector<std::string> words = split(line);
      if (!words.empty() && words[0] == word &&
          (status.empty() || (words.size() > 3 && words[3] == status))) {
        ++count;
      }
    }
  }
  return count;
}

// Waits (polling the logs; bounded, a hang fails) until the workers' logs have `count` lines as
// count_log_lines() counts them.
inline bool wait_for_log_lines(const std::vector<std::string>& log_paths, int count,
                               const std::string& word, const std::string& status = "") {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (count_log_lines(log_paths, word, status) < count) {
    if (std::chrono::steady_clock::now() > deadline) {
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polling interval
  }
  return true;
}

// Check the logs of a race: every key completed exactly once by a holder that did the work,
// the ledger row names that holder, and the holds of a key never overlap: each holder's
// successful operations all started before the next holder's claim returned.
// With `unknown_outcomes` (runs cut by faults), a key may have no logged completion when the
// worker died with its completion's outcome unknown; the row must then name a holder that did
// the work.
inline RaceReport check_race(const std::vector<std::string>& log_paths, int key_count,
                             Ledger& ledger, bool unknown_outcomes = false) {
  struct Hold {
    std::string key;
    int64_t attempt = 0;
    int64_t claim_end = 0;
    int64_t last_success_start = 0;
    bool worked = false;
    bool completed = false;
  };
  std::map<std::string, Hold> holds;  // by token
  RaceReport report;
  for (const std::string& path : log_paths) {
    std::ifstream log(path);
    std::string line;
    while (std::getline(log, line)) {
      const std::vector<std::string> words = split(line);
      if (words.empty()) {
        continue;
      }
      if (words[0] == "error") {
        ++report.errors;
        continue;
      }
      if (words.size() < 3) {
        continue;
      }
      Hold& hold = holds[words[2]];
      if (words[0] == "claim" && words.size() == 6) {
        EXPECT_TRUE(hold.key.empty()) << "token claimed twice: " << line;
        hold.key = words[1];
        hold.attempt = std::stoll(words[3]);
        hold.claim_end = std::stoll(words[5]);
        hold.last_success_start = std::stoll(words[4]);
      } else if (words[0] == "work") {
        hold.worked = true;
      } else if ((words[0] == "heartbeat" || words[0] == "complete") && words.size() == 6) {
        if (words[3] == "ok") {
          hold.last_success_start =
              std::max<int64_t>(hold.last_success_start, std::stoll(words[4]));
          if (words[0] == "complete") {
            EXPECT_FALSE(hold.completed) << line;
            hold.completed = true;
          }
        } else {
          ++report.lost;
        }
      }
    }
  }
  std::map<std::string, std::vector<const Hold*>> by_key;
  for (const auto& [token, hold] : holds) {
    EXPECT_FALSE(hold.key.empty()) << "operation without a logged claim: " << token;
    by_key[hold.key].push_back(&hold);
    ++report.holds;
    if (hold.attempt > 1) {
      ++report.takeovers;
    }
  }
  EXPECT_EQ(static_cast<int>(by_key.size()), key_count);
  for (auto& [key, key_holds] : by_key) {
    std::sort(key_holds.begin(), key_holds.end(),
              [](const Hold* a, const Hold* b) { return a->attempt < b->attempt; });
    int completions = 0;
    std::string completed_token;
    for (size_t i = 0; i < key_holds.size(); ++i) {
      const Hold& hold = *key_holds[i];
      if (i > 0) {
        const Hold& previous = *key_holds[i - 1];
        EXPECT_LT(previous.attempt, hold.attempt) << key << ": two holders with one attempt";
        EXPECT_LT(previous.last_success_start, hold.claim_end)
            << key << ": attempt " << previous.attempt << " still succeeded after attempt "
            << hold.attempt << " had claimed";
      }
      if (hold.completed) {
        ++completions;
        EXPECT_TRUE(hold.worked) << key << ": completed without doing the work";
        EXPECT_EQ(i, key_holds.size() - 1) << key << ": claimed again after completion";
        for (const auto& [token, candidate] : holds) {
          if (&candidate == &hold) {
            completed_token = token;
          }
        }
      }
    }
    const LedgerRow row = ledger.lookup(key);
    EXPECT_EQ(row.state, RowState::k_completed) << key;
    if (unknown_outcomes && completions == 0) {
      auto holder = holds.find(row.claim_token);
      EXPECT_TRUE(holder != holds.end() && holder->second.worked)
          << key << ": completed by a token whose worker did not do the work";
      continue;
    }
    EXPECT_EQ(completions, 1) << key;
    EXPECT_EQ(row.claim_token, completed_token) << key;
  }
  return report;
}

inline std::optional<std::string> libfaketime_path() {
  for (const char* candidate : {"/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
                                "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
                                "/usr/lib/faketime/libfaketime.so.1"}) {
    if (std::filesystem::exists(candidate)) {
      return std::string(candidate);
    }
  }
  return std::nullopt;
}

}  // namespace idem::ledger_test
