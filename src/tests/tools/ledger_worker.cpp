// SPDX-License-Identifier: MIT
// A ledger worker process for the multi-process ledger tests (race, zombie, clock skew, faults).
//   ledger_worker race DSN LOG BARRIER_FD KEYS LEASE_S WORK_MS [tolerate-errors]
//       wait for EOF on BARRIER_FD, then claim/complete the keys race-0000.. until every one is
//       completed, abandoning some claims and stalling some holds past the lease; log every step
//       with its wall-clock bounds.
//   ledger_worker hold DSN KEY LEASE_S
//       claim KEY, print "claimed TOKEN ATTEMPT", wait for a line on stdin, then print
//       "heartbeat 0|1" and "complete 0|1" for that claim.
//   ledger_worker try DSN KEY LEASE_S
//       claim KEY once; print "OUTCOME LEASE_LEFT LOCAL_UNIX_TIME TOKEN".
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/error.hpp"
#include "ledger/ledger.hpp"

namespace {

using idem::ClaimOutcome;

int64_t wall_ns() {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
}

std::mt19937_64& generator() {
  static std::mt19937_64 engine(std::random_device{}() ^ (static_cast<uint64_t>(getpid()) << 20) ^
                                static_cast<uint64_t>(wall_ns()));
  return engine;
}

std::string new_token() {
  static const char* digits = "0123456789abcdef";
  std::string token;
  for (int i = 0; i < 32; ++i) {
    token += digits[generator()() % 16];
  }
  return token;
}

const char* outcome_name(ClaimOutcome outcome) {
  switch (outcome) {
    case ClaimOutcome::k_claimed:
      return "claimed";
    case ClaimOutcome::k_busy:
      return "busy";
    case ClaimOutcome::k_completed:
      return "completed";
  }
  return "?";
}

idem::ClaimRequest request_for(const std::string& key, int lease_s, const std::string& token) {
  idem::ClaimRequest request;
  request.work_key = key;
  request.namespace_name = "race";
  request.output_uri = "/out/" + key + ".tif";
  request.work_json = "{}";
  request.claim_token = token;
  request.lease = std::chrono::seconds(lease_s);
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  request.worker_host = host;
  request.worker_pid = getpid();
  return request;
}

// Retry an operation whose outcome is unknown after a ledger error (connection lost, server
// restarting). The operations retried are safe to repeat with the same token.
template <class Operation>
auto with_retries(std::ofstream& log, const std::string& what, bool tolerate, Operation operation)
    -> decltype(operation()) {
  for (int attempt = 0;; ++attempt) {
    try {
      return operation();
    } catch (const idem::Error& error) {
      log << "error " << what << " " << wall_ns() << " " << error.what() << "\n" << std::flush;
      if (!tolerate || attempt >= 60) {
        throw;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
  }
}

int run_race(const std::string& dsn, const std::string& log_path, int barrier_fd, int key_count,
             int lease_s, int work_ms, bool tolerate) {
  std::ofstream log(log_path, std::ios::app);
  std::unique_ptr<idem::Ledger> ledger;
  ledger = with_retries(log, "open", tolerate, [&] { return idem::Ledger::open(dsn); });
  std::vector<std::string> pending;
  for (int i = 0; i < key_count; ++i) {
    char key[32];
    std::snprintf(key, sizeof key, "race-%04d", i);
    pending.emplace_back(key);
  }
  std::shuffle(pending.begin(), pending.end(), generator());
  // Connected: the test releases the workers once every one of them says so.
  log << "ready " << wall_ns() << "\n" << std::flush;
  if (barrier_fd >= 0) {
    char byte = 0;
    while (read(barrier_fd, &byte, 1) > 0) {
    }
    close(barrier_fd);
  }
  const auto lease = std::chrono::seconds(lease_s);
  while (!pending.empty()) {
    bool progress = false;
    std::vector<std::string> still_pending;
    for (const std::string& key : pending) {
      const std::string token = new_token();
      const idem::ClaimRequest request = request_for(key, lease_s, token);
      const int64_t claim_start = wall_ns();
      const idem::ClaimResult result =
          with_retries(log, "claim", tolerate, [&] { return ledger->claim(request); });
      const int64_t claim_end = wall_ns();
      if (result.outcome == ClaimOutcome::k_completed) {
        progress = true;
        continue;
      }
      still_pending.push_back(key);
      if (result.outcome == ClaimOutcome::k_busy) {
        continue;
      }
      progress = true;
      log << "claim " << key << " " << token << " " << result.attempt << " " << claim_start << " "
          << claim_end << "\n";
      bool held = true;
      const int dice = static_cast<int>(generator()() % 100);
      if (dice < 2) {
        // Abandon the claim (as a killed worker would): someone takes it over after expiry.
        log << "abandon " << key << " " << token << "\n";
        continue;
      }
      if (dice < 5) {
        // Stall past the lease without heartbeats (a paused or overloaded worker).
        std::this_thread::sleep_for(lease * 2);
      } else if (dice < 8) {
        // Long work, kept alive by heartbeats.
        for (int beat = 0; beat < 3 && held; ++beat) {
          std::this_thread::sleep_for(lease * 2 / 5);
          const int64_t start = wall_ns();
          held = with_retries(log, "heartbeat", tolerate,
                              [&] { return ledger->heartbeat(key, token, lease); });
          log << "heartbeat " << key << " " << token << " " << (held ? "ok" : "lost") << " "
              << start << " " << wall_ns() << "\n";
        }
      } else if (work_ms > 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(generator()() % (work_ms + 1)));
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(generator()() % 2000));
      }
      if (!held) {
        continue;
      }
      log << "work " << key << " " << token << "\n";
      const int64_t start = wall_ns();
      idem::OutputFingerprint fingerprint;
      fingerprint.size = 1;
      const bool completed = with_retries(
          log, "complete", tolerate, [&] { return ledger->complete(key, token, fingerprint); });
      log << "complete " << key << " " << token << " " << (completed ? "ok" : "lost") << " "
          << start << " " << wall_ns() << "\n";
      if (completed) {
        still_pending.pop_back();
      }
    }
    log << std::flush;
    pending.swap(still_pending);
    if (!progress) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  log << "done " << getpid() << "\n";
  return 0;
}

int run_hold(const std::string& dsn, const std::string& key, int lease_s) {
  auto ledger = idem::Ledger::open(dsn);
  const std::string token = new_token();
  const idem::ClaimResult result = ledger->claim(request_for(key, lease_s, token));
  if (result.outcome != ClaimOutcome::k_claimed) {
    std::cout << outcome_name(result.outcome) << std::endl;
    return 1;
  }
  std::cout << "claimed " << token << " " << result.attempt << std::endl;
  std::string line;
  std::getline(std::cin, line);
  std::cout << "heartbeat " << ledger->heartbeat(key, token, std::chrono::seconds(lease_s))
            << std::endl;
  idem::OutputFingerprint fingerprint;
  fingerprint.size = 666;
  std::cout << "complete " << ledger->complete(key, token, fingerprint) << std::endl;
  return 0;
}

int run_try(const std::string& dsn, const std::string& key, int lease_s) {
  auto ledger = idem::Ledger::open(dsn);
  const std::string token = new_token();
  const idem::ClaimResult result = ledger->claim(request_for(key, lease_s, token));
  std::cout << outcome_name(result.outcome) << " " << result.row.lease_left_seconds.value_or(0.0)
            << " " << static_cast<int64_t>(time(nullptr)) << " " << token << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (args.size() >= 7 && args[0] == "race") {
      return run_race(args[1], args[2], std::atoi(args[3].c_str()), std::atoi(args[4].c_str()),
                      std::atoi(args[5].c_str()), std::atoi(args[6].c_str()),
                      args.size() > 7 && args[7] == "tolerate-errors");
    }
    if (args.size() == 4 && args[0] == "hold") {
      return run_hold(args[1], args[2], std::atoi(args[3].c_str()));
    }
    if (args.size() == 4 && args[0] == "try") {
      return run_try(args[1], args[2], std::atoi(args[3].c_str()));
    }
  } catch (const std::exception& error) {
    std::cerr << "ledger_worker: " << error.what() << std::endl;
    return 2;
  }
  std::cerr << "usage: ledger_worker race|hold|try ... (see the source)" << std::endl;
  return 64;
}
