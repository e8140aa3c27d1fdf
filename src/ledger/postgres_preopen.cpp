// SPDX-License-Identifier: MIT
// Opening a PostgreSQL ledger's connection ahead of need (Ledger::preopen): libpq's non-blocking
// connection is started, and moved on whenever the caller passes by (advance), without ever
// waiting; the server answers meanwhile. The next PostgresLedger for the same DSN in this process
// finishes it (waiting for whatever is left) and also takes the answer to its schema query, sent
// as soon as the connection was made (ledger_internal.hpp).
//
// No thread: a second thread started while GDAL sets a warp up was measured to cost a tile
// process more (bench/RESULTS.md) (libstdc++ and glibc use atomic operations from the moment a
// process has threads), more than the connection it would have made ahead.

#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "ledger/ledger_internal.hpp"

namespace idem::ledger_detail {
namespace {

using Clock = std::chrono::steady_clock;

struct Attempt {
  // k_gave_up: not connected by the deadline; k_unusable: connected, but the query's answer
  // did not come (the caller connects itself).
  enum class Phase { k_connecting, k_asking, k_done, k_gave_up, k_unusable };

  PostgresOpening opening;
  pg::Connection connection;
  pg::Result first_answer;
  Phase phase = Phase::k_connecting;
  Clock::time_point started = Clock::now();
  PostgresPollingStatusType polling = PGRES_POLLING_WRITING;
};

struct Registry {
  std::mutex mutex;
  pid_t owner = getpid();
  std::map<std::string, std::unique_ptr<Attempt>> attempts;  // not yet taken
  std::atomic<bool> any{false};                              // attempts is not empty
};

Registry& registry() {
  static auto* instance = new Registry();  // leaked: attempts may be left at exit
  return *instance;
}

// Whether the connection's socket is ready for `events`: at once (`deadline` empty) or by the
// deadline. A socket libpq no longer has counts as ready: its next call reports why.
bool ready(PGconn* connection, short events, std::optional<Clock::time_point> deadline) {
  for (;;) {
    pollfd descriptor{PQsocket(connection), events, 0};
    if (descriptor.fd < 0) {
      return true;
    }
    int timeout_ms = 0;
    if (deadline) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now()).count();
      if (left <= 0) {
        return false;
      }
      timeout_ms = static_cast<int>(left);
    }
    const int result = ::poll(&descriptor, 1, timeout_ms);
    if (result != 0 && !(result < 0 && errno == EINTR)) {
      return true;  // ready, or an error that the next libpq call reports
    }
    if (result == 0 && !deadline) {
      return false;
    }
  }
}

// Moves the attempt on as far as it goes without waiting (`deadline` empty), or to its end.
void drive(Attempt& attempt, std::optional<Clock::time_point> deadline) {
  PGconn* connection = attempt.connection.get();
  for (;;) {
    switch (attempt.phase) {
      case Attempt::Phase::k_connecting: {
        if (attempt.polling == PGRES_POLLING_FAILED) {
          attempt.phase = Attempt::Phase::k_done;  // handed over: its message is the one to report
          break;
        }
        if (attempt.polling == PGRES_POLLING_OK) {
          std::vector<const char*> values;
          for (const std::string& value : attempt.opening.query_params) {
            values.push_back(value.c_str());
          }
          const bool sent = PQsendQueryParams(connection, attempt.opening.query.c_str(),
                                              static_cast<int>(values.size()), nullptr,
                                              values.data(), nullptr, nullptr, 0) == 1;
          attempt.phase = sent ? Attempt::Phase::k_asking : Attempt::Phase::k_done;
          break;
        }
        const short events = attempt.polling == PGRES_POLLING_READING ? POLLIN : POLLOUT;
        if (!ready(connection, events, deadline)) {
          if (deadline) {
            attempt.phase = Attempt::Phase::k_gave_up;
          }
          return;
        }
        attempt.polling = PQconnectPoll(connection);
        break;
      }
      case Attempt::Phase::k_asking: {
        if (PQconsumeInput(connection) != 1) {
          attempt.phase = Attempt::Phase::k_unusable;
          return;
        }
        if (PQisBusy(connection) == 1) {
          if (!ready(connection, POLLIN, deadline)) {
            if (deadline) {
              attempt.phase = Attempt::Phase::k_unusable;  // in the middle of a query
            }
            return;
          }
          break;
        }
        attempt.first_answer.reset(PQgetResult(connection));
        while (pg::Result(PQgetResult(connection))) {
        }
        attempt.phase = Attempt::Phase::k_done;
        break;
      }
      case Attempt::Phase::k_done:
      case Attempt::Phase::k_gave_up:
      case Attempt::Phase::k_unusable:
        return;
    }
  }
}

// After a fork the parent's attempts are left alone: the child must not touch their sockets.
void forget_parents_attempts(Registry& shared) {
  if (shared.owner == getpid()) {
    return;
  }
  for (auto& entry : shared.attempts) {
    (void)entry.second->connection.release();
  }
  shared.attempts.clear();
  shared.any = false;
  shared.owner = getpid();
}

}  // namespace

void start_postgres_preopen(const std::string& dsn, PostgresOpening opening) {
  Registry& shared = registry();
  std::lock_guard<std::mutex> lock(shared.mutex);
  forget_parents_attempts(shared);
  if (shared.attempts.count(dsn) != 0) {
    return;
  }
  auto attempt = std::make_unique<Attempt>();
  attempt->opening = std::move(opening);
  const ConnectParameters parameters = connect_parameters(dsn, attempt->opening.skip_gss);
  attempt->connection.reset(
      PQconnectStartParams(parameters.keywords.data(), parameters.values.data(), 1));
  if (!attempt->connection) {
    return;  // out of memory: the ledger connects when it is opened
  }
  if (PQstatus(attempt->connection.get()) == CONNECTION_BAD) {
    attempt->polling = PGRES_POLLING_FAILED;
  }
  drive(*attempt, std::nullopt);
  shared.attempts.emplace(dsn, std::move(attempt));
  shared.any = true;
}

void advance_postgres_preopens() {
  Registry& shared = registry();
  if (!shared.any.load()) {
    return;
  }
  std::lock_guard<std::mutex> lock(shared.mutex);
  forget_parents_attempts(shared);
  for (auto& entry : shared.attempts) {
    drive(*entry.second, std::nullopt);
  }
}

std::optional<Preopened> take_postgres_preopened(const std::string& dsn) {
  std::unique_ptr<Attempt> attempt;
  {
    Registry& shared = registry();
    if (!shared.any.load()) {
      return std::nullopt;
    }
    std::lock_guard<std::mutex> lock(shared.mutex);
    forget_parents_attempts(shared);
    const auto found = shared.attempts.find(dsn);
    if (found == shared.attempts.end()) {
      return std::nullopt;
    }
    attempt = std::move(found->second);
    shared.attempts.erase(found);
    shared.any = !shared.attempts.empty();
  }
  drive(*attempt, attempt->started + attempt->opening.connect_timeout);
  if (attempt->phase == Attempt::Phase::k_unusable) {
    return std::nullopt;  // the caller connects itself (this connection is closed here)
  }
  Preopened result;
  if (attempt->phase == Attempt::Phase::k_gave_up) {
    result.timed_out = true;  // libpq would have given up too (its connection closed here)
    return result;
  }
  result.connection = std::move(attempt->connection);
  result.first_answer = std::move(attempt->first_answer);
  return result;
}

}  // namespace idem::ledger_detail
