// SPDX-License-Identifier: MIT
// The ledger contract, one value-parameterised suite run against SQLite, PostgreSQL with PostGIS
// and PostgreSQL without it: claims, leases, fencing, release, invalidation, supersession,
// lookups, forgetting, filters, retention, the digest cache and the migrations. Real databases.
#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "base/error.hpp"
#include "cpl_conv.h"
#include "cpl_error.h"
#include "ledger/caller_transaction.hpp"
#include "ledger/ledger.hpp"
#include "ledger/ledger_internal.hpp"
#include "ledger_test_support.hpp"

namespace idem {
namespace {

using namespace std::chrono_literals;
using ledger_test::make_fingerprint;
using ledger_test::make_request;
using ledger_test::pg_exec;
using ledger_test::random_token;

// What `gdal-idem prune --older-than AGE` asks: every namespace, completed before now - AGE.
ArchiveRequest older_than(std::chrono::seconds age) {
  ArchiveRequest request;
  request.older_than = age;
  return request;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class LedgerConformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (is_sqlite()) {
      m_sqlite_path = m_dir.path() + "/state/ledger.sqlite";
      m_dsn = "sqlite:" + m_sqlite_path;
    } else {
      IDEM_REQUIRE_PG_OR_SKIP();
      m_lock = std::make_unique<ledger_test::PgTestLock>();
      ASSERT_TRUE(m_lock->ok());
      m_dsn = ledger_test::pg_dsn_for(database());
      m_admin = ledger_test::pg_connect(m_dsn);
      ASSERT_TRUE(m_admin);
      pg_exec(m_admin.get(), "SET client_min_messages = warning");
      pg_exec(m_admin.get(), "DROP SCHEMA IF EXISTS idem CASCADE");
    }
    m_ledger = Ledger::open(m_dsn);
  }

  bool is_sqlite() const { return GetParam() == "sqlite"; }
  bool with_postgis() const { return GetParam() == "postgresql"; }
  std::string database() const {
    return with_postgis() ? ledger_test::k_gis_database : ledger_test::k_nogis_database;
  }

  // Ends the lease of the open claim on `key` now, on the ledger's own clock: what a test of an
  // expired lease would otherwise sleep for.
  void end_lease(const std::string& key) {
    const std::string update =
        " SET lease_expires_at = claimed_at WHERE completed_at IS NULL AND released_at IS NULL"
        " AND work_key = '" +
        key + "' RETURNING work_key";
    EXPECT_EQ(raw_value("UPDATE ledger" + update, "UPDATE idem.ledger" + update), key);
  }

  // Moves the times of `key`'s row a second into the past, on the ledger's own clock: what a test
  // of "completed before now - N" would otherwise sleep for.
  void backdate(const std::string& key) {
    const std::string where = " WHERE work_key = '" + key + "' RETURNING work_key";
    EXPECT_EQ(raw_value("UPDATE ledger SET claimed_at = claimed_at - 1, lease_expires_at = "
                        "lease_expires_at - 1, completed_at = completed_at - 1" +
                            where,
                        "UPDATE idem.ledger SET claimed_at = claimed_at - interval '1 second', "
                        "lease_expires_at = lease_expires_at - interval '1 second', completed_at "
                        "= completed_at - interval '1 second'" +
                            where),
              key);
  }

  // A value from the backend's own tables, bypassing the interface (SQLite: the same file).
  std::string raw_value(const std::string& sqlite_sql, const std::string& pg_sql) {
    if (!is_sqlite()) {
      return pg_exec(m_admin.get(), pg_sql);
    }
    sqlite3* db = nullptr;
    sqlite3_open(m_sqlite_path.c_str(), &db);
    sqlite3_stmt* statement = nullptr;
    std::string value;
    if (sqlite3_prepare_v2(db, sqlite_sql.c_str(), -1, &statement, nullptr) == SQLITE_OK &&
        sqlite3_step(statement) == SQLITE_ROW) {
      const unsigned char* text = sqlite3_column_text(statement, 0);
      value = text != nullptr ? reinterpret_cast<const char*>(text) : "";
    } else {
      ADD_FAILURE() << sqlite3_errmsg(db);
    }
    sqlite3_finalize(statement);
    sqlite3_close(db);
    return value;
  }

  ledger_test::TempDir m_dir;
  std::string m_sqlite_path;
  std::string m_dsn;
  std::unique_ptr<ledger_test::PgTestLock> m_lock;
  ledger_test::PgHandle m_admin;
  std::unique_ptr<Ledger> m_ledger;
};

TEST_P(LedgerConformance, ClaimOfNewKeyIsClaimedWithDatabaseTimes) {
  const ClaimRequest request = make_request("k1", 60s);
  const double before = m_ledger->now();
  const ClaimResult result = m_ledger->claim(request);
  EXPECT_EQ(result.outcome, ClaimOutcome::k_claimed);
  EXPECT_EQ(result.attempt, 1);
  EXPECT_EQ(result.claim_token, request.claim_token);
  EXPECT_EQ(result.row.state, RowState::k_in_flight);
  const LedgerRow row = m_ledger->lookup("k1");
  EXPECT_EQ(row.state, RowState::k_in_flight);
  EXPECT_EQ(row.worker_host, "testhost");
  EXPECT_EQ(row.worker_pid, getpid());
  ASSERT_TRUE(row.claimed_at && row.lease_expires_at && row.lease_left_seconds);
  EXPECT_NEAR(*row.claimed_at, before, 5.0);
  EXPECT_NEAR(*row.lease_expires_at - *row.claimed_at, 60.0, 0.01);
  EXPECT_GT(*row.lease_left_seconds, 55.0);
  EXPECT_FALSE(row.completed_at);
}

TEST_P(LedgerConformance, ClaimOfHeldKeyIsBusyWithHolder) {
  const ClaimRequest first = make_request("k1", 60s);
  ASSERT_EQ(m_ledger->claim(first).outcome, ClaimOutcome::k_claimed);
  ClaimRequest second = make_request("k1", 60s);
  second.worker_host = "otherhost";
  auto other = Ledger::open(m_dsn);
  const ClaimResult result = other->claim(second);
  EXPECT_EQ(result.outcome, ClaimOutcome::k_busy);
  EXPECT_TRUE(result.claim_token.empty());
  EXPECT_EQ(result.row.worker_host, "testhost");
  EXPECT_EQ(result.row.claim_token, first.claim_token);
  ASSERT_TRUE(result.row.lease_left_seconds);
  EXPECT_GT(*result.row.lease_left_seconds, 50.0);
  EXPECT_EQ(m_ledger->lookup("k1").attempt, 1);
}

TEST_P(LedgerConformance, ClaimOfCompletedKeyIsCompleted) {
  const ClaimRequest first = make_request("k1", 60s);
  ASSERT_EQ(m_ledger->claim(first).outcome, ClaimOutcome::k_claimed);
  ASSERT_TRUE(m_ledger->complete("k1", first.claim_token, make_fingerprint(42), 7));
  const ClaimResult result = m_ledger->claim(make_request("k1", 60s));
  EXPECT_EQ(result.outcome, ClaimOutcome::k_completed);
  EXPECT_EQ(result.row.state, RowState::k_completed);
  ASSERT_TRUE(result.row.fingerprint);
  EXPECT_EQ(result.row.fingerprint->size, 42);
  EXPECT_EQ(result.row.claim_token, first.claim_token);
}

// What a worker asks first: completed work comes back as it stands, with nothing written (on
// PostgreSQL the row is not even locked: its xmax stays 0); anything else is the claim.
TEST_P(LedgerConformance, ClaimUnlessCompletedAnswersCompletedWorkWithoutWriting) {
  const ClaimRequest first = make_request("k1", 60s);
  const ClaimResult claimed = m_ledger->claim_unless_completed(first);
  ASSERT_EQ(claimed.outcome, ClaimOutcome::k_claimed);
  EXPECT_EQ(claimed.attempt, 1);
  EXPECT_EQ(claimed.claim_token, first.claim_token);
  EXPECT_EQ(claimed.row.state, RowState::k_in_flight);

  auto other = Ledger::open(m_dsn);
  const ClaimResult busy = other->claim_unless_completed(make_request("k1", 60s));
  EXPECT_EQ(busy.outcome, ClaimOutcome::k_busy);
  EXPECT_EQ(busy.row.claim_token, first.claim_token);
  EXPECT_TRUE(busy.claim_token.empty());

  ASSERT_TRUE(m_ledger->complete("k1", first.claim_token, make_fingerprint(42), 7));
  auto row_version = [&] {  // PostgreSQL: xmin changes with any write to the row
    return raw_value(
        "SELECT attempt || ' ' || claimed_at || ' ' || lease_expires_at FROM ledger "
        "WHERE work_key = 'k1'",
        "SELECT attempt || ' ' || claimed_at || ' ' || lease_expires_at || ' ' || xmin "
        "FROM idem.ledger WHERE work_key = 'k1'");
  };
  const std::string before = row_version();
  const ClaimResult done = other->claim_unless_completed(make_request("k1", 60s));
  EXPECT_EQ(done.outcome, ClaimOutcome::k_completed);
  EXPECT_TRUE(done.claim_token.empty());
  EXPECT_EQ(done.attempt, 1);
  EXPECT_EQ(done.row.state, RowState::k_completed);
  EXPECT_EQ(done.row.claim_token, first.claim_token);
  ASSERT_TRUE(done.row.fingerprint);
  EXPECT_EQ(done.row.fingerprint->size, 42);
  EXPECT_EQ(done.row.feature_count, 7);
  EXPECT_EQ(row_version(), before);
  if (!is_sqlite()) {
    EXPECT_EQ(pg_exec(m_admin.get(), "SELECT xmax FROM idem.ledger WHERE work_key = 'k1'"), "0");
  }

  // A completion dropped (invalidated) or superseded is claimed again, as by claim().
  ASSERT_TRUE(other->invalidate("k1", first.claim_token));
  const ClaimRequest again = make_request("k1", 60s);
  const ClaimResult retaken = other->claim_unless_completed(again);
  EXPECT_EQ(retaken.outcome, ClaimOutcome::k_claimed);
  EXPECT_EQ(retaken.attempt, 2);
  EXPECT_EQ(retaken.claim_token, again.claim_token);
  ASSERT_TRUE(other->complete("k1", again.claim_token, make_fingerprint(43)));
  ClaimRequest newer = make_request("k2", 60s);
  newer.output_uri = m_ledger->lookup("k1").output_uri;
  ASSERT_EQ(m_ledger->claim(newer).outcome, ClaimOutcome::k_claimed);
  ASSERT_TRUE(m_ledger->complete("k2", newer.claim_token, make_fingerprint(44)));
  ASSERT_TRUE(m_ledger->lookup("k1").superseded_at);
  const ClaimResult revived = m_ledger->claim_unless_completed(make_request("k1", 60s));
  EXPECT_EQ(revived.outcome, ClaimOutcome::k_claimed);
  EXPECT_EQ(revived.attempt, 3);
  EXPECT_EQ(m_ledger->lookup("k1").state, RowState::k_in_flight);
}

// The question with work to do meanwhile: PostgreSQL runs it while the statement is on the
// server (here held there by a table lock that only the work itself lets go of, so a ledger
// that read the answer first would wait for the lock holder's timeout and see no waiting
// statement); SQLite does not run it. The answers are those of the plain question.
TEST_P(LedgerConformance, ClaimUnlessCompletedRunsItsMeanwhileWhileTheServerAnswers) {
  int runs = 0;
  if (is_sqlite()) {
    const ClaimResult claimed =
        m_ledger->claim_unless_completed(make_request("k1", 60s), [&] { ++runs; });
    EXPECT_EQ(claimed.outcome, ClaimOutcome::k_claimed);
    EXPECT_EQ(runs, 0);
    return;
  }
  // Unprepared on first use (k1), and again on the next (k2: a use with work meanwhile never
  // prepares); two plain questions then prepare it (k3, k4), and the last runs it prepared (k5).
  for (const std::string key : {"k1", "k2", "k3", "k4", "k5"}) {
    const ClaimRequest request = make_request(key, 60s);
    if (key == "k3" || key == "k4") {
      ASSERT_EQ(m_ledger->claim_unless_completed(request).outcome, ClaimOutcome::k_claimed);
      continue;
    }
    std::promise<void> locked;
    std::promise<void> release;
    std::thread holder([&] {
      ledger_test::PgHandle connection = ledger_test::pg_connect(m_dsn);
      pg_exec(connection.get(), "BEGIN");
      pg_exec(connection.get(), "LOCK TABLE idem.ledger IN EXCLUSIVE MODE");
      locked.set_value();
      release.get_future().wait_for(10s);
      pg_exec(connection.get(), "COMMIT");
    });
    locked.get_future().wait();
    std::string waiting;
    const ClaimResult claimed = m_ledger->claim_unless_completed(request, [&] {
      ++runs;
      for (int i = 0; i < 100 && waiting.empty(); ++i) {
        waiting = pg_exec(m_admin.get(),
                          "SELECT wait_event_type FROM pg_stat_activity "
                          "WHERE application_name = 'gdal-idem' AND state = 'active' "
                          "AND query LIKE '%INSERT INTO idem.ledger%'");
        std::this_thread::sleep_for(10ms);
      }
      release.set_value();
    });
    holder.join();
    EXPECT_EQ(waiting, "Lock") << key;
    EXPECT_EQ(claimed.outcome, ClaimOutcome::k_claimed) << key;
    EXPECT_EQ(claimed.claim_token, request.claim_token) << key;
  }
  EXPECT_EQ(runs, 3);

  // Completed work comes back as completed; the meanwhile still ran once.
  const LedgerRow row = m_ledger->lookup("k1");
  ASSERT_TRUE(m_ledger->complete("k1", row.claim_token, make_fingerprint(9)));
  const ClaimResult done =
      m_ledger->claim_unless_completed(make_request("k1", 60s), [&] { ++runs; });
  EXPECT_EQ(done.outcome, ClaimOutcome::k_completed);
  EXPECT_EQ(done.row.fingerprint->size, 9);
  EXPECT_EQ(runs, 4);

  // An exception from the meanwhile comes out once the answer is read: the connection is
  // usable and the claim was made.
  const ClaimRequest failing = make_request("k6", 60s);
  EXPECT_THROW(m_ledger->claim_unless_completed(
                   failing, [] { throw Error(ErrorKind::k_internal, "meanwhile failed"); }),
               Error);
  const LedgerRow made = m_ledger->lookup("k6");
  EXPECT_EQ(made.claim_token, failing.claim_token);
  EXPECT_TRUE(m_ledger->release("k6", failing.claim_token));
}

TEST_P(LedgerConformance, ExpiredLeaseIsTakenOverAndOldHolderIsFenced) {
  const ClaimRequest first = make_request("k1", 1s);
  ASSERT_EQ(m_ledger->claim(first).outcome, ClaimOutcome::k_claimed);
  end_lease("k1");
  const ClaimRequest second = make_request("k1", 60s);
  auto other = Ledger::open(m_dsn);
  const ClaimResult taken = other->claim(second);
  ASSERT_EQ(taken.outcome, ClaimOutcome::k_claimed);
  EXPECT_EQ(taken.attempt, 2);
  EXPECT_FALSE(m_ledger->heartbeat("k1", first.claim_token, 60s));
  EXPECT_FALSE(m_ledger->complete("k1", first.claim_token, make_fingerprint(1)));
  EXPECT_FALSE(m_ledger->release("k1", first.claim_token));
  const LedgerRow row = m_ledger->lookup("k1");
  EXPECT_EQ(row.state, RowState::k_in_flight);
  EXPECT_EQ(row.claim_token, second.claim_token);
  EXPECT_TRUE(other->complete("k1", second.claim_token, make_fingerprint(2)));
  EXPECT_EQ(m_ledger->lookup("k1").fingerprint->size, 2);
}

TEST_P(LedgerConformance, RetryWithSameTokenIsClaimedNotBusy) {
  const ClaimRequest request = make_request("k1", 60s);
  ASSERT_EQ(m_ledger->claim(request).outcome, ClaimOutcome::k_claimed);
  auto reconnected = Ledger::open(m_dsn);  // as after a lost connection
  const ClaimResult retry = reconnected->claim(request);
  EXPECT_EQ(retry.outcome, ClaimOutcome::k_claimed);
  EXPECT_EQ(retry.attempt, 1);
  EXPECT_EQ(retry.claim_token, request.claim_token);
  EXPECT_EQ(reconnected->claim(make_request("k1", 60s)).outcome, ClaimOutcome::k_busy);
}

TEST_P(LedgerConformance, HeartbeatRenewsLeaseOnlyForTheHolder) {
  const ClaimRequest request = make_request("k1", 1s);
  ASSERT_EQ(m_ledger->claim(request).outcome, ClaimOutcome::k_claimed);
  EXPECT_TRUE(m_ledger->heartbeat("k1", request.claim_token, 30s));
  EXPECT_GT(*m_ledger->lookup("k1").lease_left_seconds, 25.0);
  EXPECT_FALSE(m_ledger->heartbeat("k1", random_token(), 30s));
  EXPECT_FALSE(m_ledger->heartbeat("absent", request.claim_token, 30s));
  // The claim's own 1 s lease is gone (25 s and more are left): another worker finds it busy
  // past that second too, as lease_left_seconds says, without waiting for it to pass.
  EXPECT_EQ(m_ledger->claim(make_request("k1", 60s)).outcome, ClaimOutcome::k_busy);
  ASSERT_TRUE(m_ledger->complete("k1", request.claim_token, make_fingerprint(3)));
  EXPECT_FALSE(m_ledger->heartbeat("k1", request.claim_token, 30s));
}

TEST_P(LedgerConformance, CompleteIsFencedAndIdempotentForItsToken) {
  const ClaimRequest request = make_request("k1", 60s);
  ASSERT_EQ(m_ledger->claim(request).outcome, ClaimOutcome::k_claimed);
  EXPECT_FALSE(m_ledger->complete("k1", random_token(), make_fingerprint(1)));
  EXPECT_EQ(m_ledger->lookup("k1").state, RowState::k_in_flight);
  EXPECT_TRUE(m_ledger->complete("k1", request.claim_token, make_fingerprint(5)));
  const double completed_at = *m_ledger->lookup("k1").completed_at;
  // A retry of a completion whose outcome was unknown: true, nothing changes.
  EXPECT_TRUE(m_ledger->complete("k1", request.claim_token, make_fingerprint(6)));
  const LedgerRow row = m_ledger->lookup("k1");
  EXPECT_EQ(row.fingerprint->size, 5);
  EXPECT_DOUBLE_EQ(*row.completed_at, completed_at);
  EXPECT_FALSE(m_ledger->complete("k1", random_token(), make_fingerprint(7)));
  EXPECT_FALSE(m_ledger->complete("absent", request.claim_token, make_fingerprint(7)));
}

// PostgreSQL: a worker's completion commits without waiting for the server's WAL flush (a lost
// one is redone after its lease); claims, heartbeats, releases and a completion inside the
// caller's transaction keep the server's setting, and IDEM_DURABLE_COMPLETION=YES keeps it for
// completions too. A deferred trigger records the setting each commit is made with.
TEST_P(LedgerConformance, CompletionAloneSkipsTheWalFlushUnlessAskedToWait) {
  if (is_sqlite()) {
    GTEST_SKIP() << "SQLite's commits never wait for the disk (synchronous=NORMAL, docs/ledger.md)";
  }
  ASSERT_EQ(pg_exec(m_admin.get(), "SHOW synchronous_commit"), "on")
      << "the test needs a server that waits for the flush by default";
  pg_exec(m_admin.get(),
          "CREATE TABLE idem.commits_seen (n serial, op text, work_key text, setting text);"
          "CREATE FUNCTION idem.note_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
          "INSERT INTO idem.commits_seen (op, work_key, setting) "
          "VALUES (TG_OP, NEW.work_key, current_setting('synchronous_commit')); "
          "RETURN NULL; END $$;"
          "CREATE CONSTRAINT TRIGGER note_commit AFTER INSERT OR UPDATE ON idem.ledger "
          "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION idem.note_commit()");
  auto seen = [&] {
    return pg_exec(m_admin.get(),
                   "SELECT string_agg(op || ' ' || work_key || ' ' || setting, ', ' ORDER BY n) "
                   "FROM idem.commits_seen");
  };
  auto forget_seen = [&] { pg_exec(m_admin.get(), "TRUNCATE idem.commits_seen"); };

  const ClaimRequest request = make_request("k1", 60s);
  ASSERT_EQ(m_ledger->claim(request).outcome, ClaimOutcome::k_claimed);
  ASSERT_TRUE(m_ledger->heartbeat("k1", request.claim_token, 60s));
  EXPECT_EQ(seen(), "INSERT k1 on, UPDATE k1 on");
  forget_seen();
  EXPECT_TRUE(m_ledger->complete("k1", request.claim_token, make_fingerprint(5)));
  EXPECT_EQ(seen(), "UPDATE k1 off");
  EXPECT_EQ(m_ledger->lookup("k1").state, RowState::k_completed);
  // The second completion runs the statement prepared; the statements after it on the same
  // connection are back to the server's setting.
  forget_seen();
  const ClaimRequest second = make_request("k2", 60s);
  ASSERT_EQ(m_ledger->claim(second).outcome, ClaimOutcome::k_claimed);
  EXPECT_TRUE(m_ledger->complete("k2", second.claim_token, make_fingerprint(5)));
  const ClaimRequest released = make_request("k5", 60s);
  ASSERT_EQ(m_ledger->claim(released).outcome, ClaimOutcome::k_claimed);
  ASSERT_TRUE(m_ledger->release("k5", released.claim_token));
  EXPECT_EQ(seen(), "INSERT k2 on, UPDATE k2 off, INSERT k5 on, UPDATE k5 on");

  forget_seen();
  CPLSetConfigOption("IDEM_DURABLE_COMPLETION", "YES");
  const ClaimRequest durable = make_request("k3", 60s);
  ASSERT_EQ(m_ledger->claim(durable).outcome, ClaimOutcome::k_claimed);
  const bool completed = m_ledger->complete("k3", durable.claim_token, make_fingerprint(6));
  CPLSetConfigOption("IDEM_DURABLE_COMPLETION", nullptr);
  EXPECT_TRUE(completed);
  EXPECT_EQ(seen(), "INSERT k3 on, UPDATE k3 on");

  // The caller's transaction commits as the caller's session says.
  forget_seen();
  const ClaimRequest in_caller = make_request("k4", 60s);
  ASSERT_EQ(m_ledger->claim(in_caller).outcome, ClaimOutcome::k_claimed);
  ledger_test::PgHandle caller = ledger_test::pg_connect(m_dsn);
  ASSERT_TRUE(caller);
  pg_exec(caller.get(), "BEGIN");
  EXPECT_TRUE(complete_in_transaction(*m_ledger, caller.get(), "k4", in_caller.claim_token,
                                      make_fingerprint(7), 7));
  pg_exec(caller.get(), "COMMIT");
  EXPECT_EQ(seen(), "INSERT k4 on, UPDATE k4 on");
}

TEST_P(LedgerConformance, ReleaseGivesTheClaimBackAtOnce) {
  const ClaimRequest request = make_request("k1", 300s);
  ASSERT_EQ(m_ledger->claim(request).outcome, ClaimOutcome::k_claimed);
  EXPECT_FALSE(m_ledger->release("k1", random_token()));
  EXPECT_TRUE(m_ledger->release("k1", request.claim_token));
  const LedgerRow released = m_ledger->lookup("k1");
  EXPECT_EQ(released.state, RowState::k_in_flight);
  EXPECT_TRUE(released.released_at);
  EXPECT_LE(*released.lease_left_seconds, 0.0);
  // A late heartbeat or completion of the released attempt changes nothing.
  EXPECT_FALSE(m_ledger->heartbeat("k1", request.claim_token, 300s));
  EXPECT_FALSE(m_ledger->complete("k1", request.claim_token, make_fingerprint(1)));
  EXPECT_FALSE(m_ledger->release("k1", request.claim_token));
  const ClaimRequest next = make_request("k1", 60s);
  const ClaimResult result = m_ledger->claim(next);
  EXPECT_EQ(result.outcome, ClaimOutcome::k_claimed);
  EXPECT_EQ(result.attempt, 2);
  EXPECT_FALSE(m_ledger->lookup("k1").released_at);
}

TEST_P(LedgerConformance, InvalidateDropsCompletionFencedOnObservedToken) {
  const ClaimRequest request = make_request("k1", 60s);
  ASSERT_EQ(m_ledger->claim(request).outcome, ClaimOutcome::k_claimed);
  EXPECT_FALSE(m_ledger->invalidate("k1", request.claim_token));  // not completed yet
  ASSERT_TRUE(m_ledger->complete("k1", request.claim_token, make_fingerprint(9)));
  EXPECT_FALSE(m_ledger->invalidate("k1", random_token()));
  EXPECT_EQ(m_ledger->lookup("k1").state, RowState::k_completed);
  EXPECT_TRUE(m_ledger->invalidate("k1", request.claim_token));
  const LedgerRow row = m_ledger->lookup("k1");
  EXPECT_EQ(row.state, RowState::k_in_flight);
  EXPECT_FALSE(row.fingerprint);
  EXPECT_FALSE(m_ledger->invalidate("k1", request.claim_token));
  const ClaimResult result = m_ledger->claim(make_request("k1", 60s));
  EXPECT_EQ(result.outcome, ClaimOutcome::k_claimed);
  EXPECT_EQ(result.attempt, 2);
}

TEST_P(LedgerConformance, ReplaceEtagIsFencedOnTokenAndPredictedValue) {
  const ClaimRequest request = make_request("k1", 60s);
  ASSERT_EQ(m_ledger->claim(request).outcome, ClaimOutcome::k_claimed);
  EXPECT_FALSE(m_ledger->replace_etag("k1", request.claim_token, "md5:ab", "\"x-2\""));
  OutputFingerprint fingerprint = make_fingerprint(9);
  fingerprint.etag = "md5:ab";
  ASSERT_TRUE(m_ledger->complete("k1", request.claim_token, fingerprint));
  EXPECT_FALSE(m_ledger->replace_etag("k1", random_token(), "md5:ab", "\"x-2\""));
  EXPECT_FALSE(m_ledger->replace_etag("k1", request.claim_token, "md5:cd", "\"x-2\""));
  EXPECT_EQ(m_ledger->lookup("k1").fingerprint->etag, "md5:ab");
  EXPECT_TRUE(m_ledger->replace_etag("k1", request.claim_token, "md5:ab", "\"x-2\""));
  const LedgerRow row = m_ledger->lookup("k1");
  EXPECT_EQ(row.state, RowState::k_completed);
  EXPECT_EQ(row.fingerprint->etag, "\"x-2\"");
  EXPECT_EQ(row.fingerprint->size, fingerprint.size);
  // Once replaced, the prediction no longer matches: a second replacement changes nothing.
  EXPECT_FALSE(m_ledger->replace_etag("k1", request.claim_token, "md5:ab", "\"y-2\""));
  EXPECT_EQ(m_ledger->lookup("k1").fingerprint->etag, "\"x-2\"");
}

TEST_P(LedgerConformance, CompletionSupersedesOlderRowsOfTheSameOutput) {
  const ClaimRequest old_work = make_request("old", 60s, "/data/out/tile.tif");
  ASSERT_EQ(m_ledger->claim(old_work).outcome, ClaimOutcome::k_claimed);
  ASSERT_TRUE(m_ledger->complete("old", old_work.claim_token, make_fingerprint(1)));
  const ClaimRequest unrelated = make_request("unrelated", 60s);
  ASSERT_EQ(m_ledger->claim(unrelated).outcome, ClaimOutcome::k_claimed);
  ASSERT_TRUE(m_ledger->complete("unrelated", unrelated.claim_token, make_fingerprint(1)));

  const ClaimRequest new_work = make_request("new", 60s, "/data/out/tile.tif");
  ASSERT_EQ(m_ledger->claim(new_work).outcome, ClaimOutcome::k_claimed);
  EXPECT_FALSE(m_ledger->lookup("old").superseded_at);  // only on completion
  ASSERT_TRUE(m_ledger->complete("new", new_work.claim_token, make_fingerprint(2)));

  const LedgerRow old_row = m_ledger->lookup("old");
  EXPECT_EQ(old_row.state, RowState::k_completed);
  ASSERT_TRUE(old_row.superseded_at);
  EXPECT_DOUBLE_EQ(*old_row.superseded_at, *m_ledger->lookup("new").completed_at);
  EXPECT_FALSE(m_ledger->lookup("new").superseded_at);
  EXPECT_FALSE(m_ledger->lookup("unrelated").superseded_at);
  // The old work's output was overwritten: claiming it again takes the superseded row over.
  const ClaimResult again = m_ledger->claim(make_request("old", 60s, "/data/out/tile.tif"));
  EXPECT_EQ(again.outcome, ClaimOutcome::k_claimed);
  EXPECT_EQ(again.attempt, 2);
  EXPECT_FALSE(again.row.superseded_at);
  EXPECT_FALSE(again.row.completed_at);
}

TEST_P(LedgerConformance, LookupReturnsEveryField) {
  ClaimRequest request = make_request("k1", 60s);
  request.layer = "elevation";
  request.tile = TileIndex{12, 2200, 1343};
  request.work_json = R"({"a":[1,2.5,"x"],"b":{"c":null}})";
  ASSERT_EQ(m_ledger->claim(request).outcome, ClaimOutcome::k_claimed);
  OutputFingerprint fingerprint = make_fingerprint(123456789012);
  fingerprint.sha256 = std::string(64, 'a');
  fingerprint.etag = "\"9b2cf535f27731c974343645a3985328\"";
  fingerprint.members = R"([{"mtime_ns":5,"path":"/out/a.tif.aux.xml","size":12}])";
  ASSERT_TRUE(m_ledger->complete("k1", request.claim_token, fingerprint, 17));
  const LedgerRow row = m_ledger->lookup("k1");
  EXPECT_EQ(row.work_key, "k1");
  EXPECT_EQ(row.namespace_name, "test");
  EXPECT_EQ(row.layer, std::optional<std::string>("elevation"));
  ASSERT_TRUE(row.tile);
  EXPECT_EQ(row.tile->z, 12);
  EXPECT_EQ(row.tile->x, 2200);
  EXPECT_EQ(row.tile->y, 1343);
  EXPECT_EQ(row.state, RowState::k_completed);
  EXPECT_EQ(row.attempt, 1);
  EXPECT_EQ(row.claim_token, request.claim_token);
  EXPECT_EQ(row.output_uri, request.output_uri);
  ASSERT_TRUE(row.fingerprint);
  EXPECT_TRUE(*row.fingerprint == fingerprint);
  EXPECT_EQ(row.feature_count, std::optional<int64_t>(17));
  EXPECT_EQ(row.work_json, request.work_json);
  ASSERT_TRUE(row.completed_at && row.claimed_at);
  EXPECT_GE(*row.completed_at, *row.claimed_at);
  EXPECT_FALSE(row.superseded_at);
  EXPECT_FALSE(row.lease_left_seconds);  // completed rows have no lease

  const LedgerRow absent = m_ledger->lookup("nothing");
  EXPECT_EQ(absent.state, RowState::k_absent);
  EXPECT_EQ(absent.work_key, "nothing");
}

TEST_P(LedgerConformance, ForgetRemovesRowsByKey) {
  for (const char* key : {"a", "c"}) {
    const ClaimRequest request = make_request(key, 60s);
    ASSERT_EQ(m_ledger->claim(request).outcome, ClaimOutcome::k_claimed);
  }
  EXPECT_EQ(m_ledger->forget_key("a"), 1);
  EXPECT_EQ(m_ledger->lookup("a").state, RowState::k_absent);
  EXPECT_EQ(m_ledger->forget_key("c"), 1);
  EXPECT_EQ(m_ledger->forget_key("c"), 0);
  EXPECT_EQ(m_ledger->lookup("c").state, RowState::k_absent);
  EXPECT_EQ(m_ledger->claim(make_request("a", 60s)).attempt, 1);
}

TEST_P(LedgerConformance, RowsFilterByNamespaceLayerOutputStateAndExpiry) {
  auto add = [&](const std::string& key, const std::string& ns, const std::string& layer,
                 std::chrono::seconds lease, bool complete) {
    ClaimRequest request = make_request(key, lease);
    request.namespace_name = ns;
    request.layer = layer;
    ASSERT_EQ(m_ledger->claim(request).outcome, ClaimOutcome::k_claimed);
    if (complete) {
      ASSERT_TRUE(m_ledger->complete(key, request.claim_token, make_fingerprint(1)));
    }
  };
  add("a1", "alpha", "dem", 60s, true);
  add("a2", "alpha", "dem", 1s, false);
  add("a3", "alpha", "rgb", 60s, false);
  add("b1", "beta", "dem", 60s, true);
  end_lease("a2");
  auto keys = [&](const Ledger::RowFilter& filter) {
    std::vector<std::string> result;
    for (const LedgerRow& row : m_ledger->rows(filter)) {
      result.push_back(row.work_key);
    }
    return result;
  };
  using Keys = std::vector<std::string>;
  EXPECT_EQ(keys({}), (Keys{"a1", "a2", "a3", "b1"}));
  Ledger::RowFilter filter;
  filter.namespace_name = "alpha";
  EXPECT_EQ(keys(filter), (Keys{"a1", "a2", "a3"}));
  filter.layer = "dem";
  EXPECT_EQ(keys(filter), (Keys{"a1", "a2"}));
  filter.state = RowState::k_completed;
  EXPECT_EQ(keys(filter), (Keys{"a1"}));
  Ledger::RowFilter in_flight;
  in_flight.state = RowState::k_in_flight;
  EXPECT_EQ(keys(in_flight), (Keys{"a2", "a3"}));
  Ledger::RowFilter expired;
  expired.expired_only = true;
  EXPECT_EQ(keys(expired), (Keys{"a2"}));
  Ledger::RowFilter by_output;
  by_output.output_uri = "/data/out/b1.tif";
  EXPECT_EQ(keys(by_output), (Keys{"b1"}));
  Ledger::RowFilter limited;
  limited.limit = 2;
  EXPECT_EQ(keys(limited), (Keys{"a1", "a2"}));
  Ledger::RowFilter absent;
  absent.state = RowState::k_absent;
  EXPECT_TRUE(keys(absent).empty());
}

TEST_P(LedgerConformance, RowsPageByKeyAndSelectInFlightOrRetriedRows) {
  // Completed first attempts (verify reads them, reap does not), and the rows reap must read: a
  // live claim, a stale one, a released one and a completed takeover (attempt 2).
  for (int i = 0; i < 25; ++i) {
    const std::string key = std::string(i < 10 ? "done0" : "done") + std::to_string(i);
    const ClaimRequest request = make_request(key, 60s);
    ASSERT_EQ(m_ledger->claim(request).outcome, ClaimOutcome::k_claimed);
    ASSERT_TRUE(m_ledger->complete(key, request.claim_token, make_fingerprint(1)));
  }
  ASSERT_EQ(m_ledger->claim(make_request("live", 60s)).outcome, ClaimOutcome::k_claimed);
  ASSERT_EQ(m_ledger->claim(make_request("stale", 1s)).outcome, ClaimOutcome::k_claimed);
  const ClaimRequest released = make_request("released", 60s);
  ASSERT_EQ(m_ledger->claim(released).outcome, ClaimOutcome::k_claimed);
  ASSERT_TRUE(m_ledger->release("released", released.claim_token));
  ASSERT_EQ(m_ledger->claim(make_request("retried", 1s)).outcome, ClaimOutcome::k_claimed);
  end_lease("stale");
  end_lease("retried");
  const ClaimRequest takeover = make_request("retried", 60s);
  const ClaimResult taken = m_ledger->claim(takeover);
  ASSERT_EQ(taken.outcome, ClaimOutcome::k_claimed);
  ASSERT_EQ(taken.attempt, 2);
  ASSERT_TRUE(m_ledger->complete("retried", takeover.claim_token, make_fingerprint(1)));

  using Keys = std::vector<std::string>;
  auto keys = [&](const Ledger::RowFilter& filter) {
    Keys result;
    for (const LedgerRow& row : m_ledger->rows(filter)) {
      result.push_back(row.work_key);
    }
    return result;
  };
  // Every row once, in key order, page by page.
  auto paged = [&](Ledger::RowFilter filter, int64_t page_rows) {
    filter.limit = page_rows;
    Keys result;
    for (int pages = 0; pages < 100; ++pages) {
      const std::vector<LedgerRow> page = m_ledger->rows(filter);
      for (const LedgerRow& row : page) {
        result.push_back(row.work_key);
      }
      if (static_cast<int64_t>(page.size()) < page_rows) {
        break;
      }
      filter.after_work_key = page.back().work_key;
    }
    return result;
  };
  Ledger::RowFilter reap;
  reap.in_flight_or_retried = true;
  EXPECT_EQ(keys(reap), (Keys{"live", "released", "retried", "stale"}));
  EXPECT_EQ(paged(reap, 3), (Keys{"live", "released", "retried", "stale"}));
  EXPECT_EQ(paged(reap, 4), (Keys{"live", "released", "retried", "stale"}));
  Ledger::RowFilter other_namespace = reap;
  other_namespace.namespace_name = "other";
  EXPECT_TRUE(keys(other_namespace).empty());

  const Keys all = keys({});
  ASSERT_EQ(all.size(), 29U);
  EXPECT_EQ(paged({}, 4), all);
  EXPECT_EQ(paged({}, 29), all);
  EXPECT_EQ(paged({}, 1000), all);
  Ledger::RowFilter completed;  // what verify reads
  completed.state = RowState::k_completed;
  const Keys done = paged(completed, 7);
  EXPECT_EQ(done.size(), 26U);
  EXPECT_EQ(done, keys(completed));
  Ledger::RowFilter after;
  after.after_work_key = "done24";
  EXPECT_EQ(keys(after), (Keys{"live", "released", "retried", "stale"}));

  // Reap's rows come from a partial index, not a scan of the ledger.
  EXPECT_EQ(raw_value("SELECT count(*) FROM sqlite_master WHERE type = 'index' "
                      "AND name = 'ledger_in_flight_or_retried_idx'",
                      "SELECT count(*) FROM pg_indexes WHERE schemaname = 'idem' "
                      "AND indexname = 'ledger_in_flight_or_retried_idx'"),
            "1");
}

TEST_P(LedgerConformance, ArchiveMovesOldCompletedRowsToHistory) {
  OutputFingerprint with_members = make_fingerprint(1);
  with_members.members = R"([{"mtime_ns":7,"path":"/out/x.tif.ovr","size":3}])";
  for (const char* key : {"done1", "done2"}) {
    const ClaimRequest request = make_request(key, 60s);
    ASSERT_EQ(m_ledger->claim(request).outcome, ClaimOutcome::k_claimed);
    ASSERT_TRUE(m_ledger->complete(key, request.claim_token, with_members));
  }
  ASSERT_EQ(m_ledger->claim(make_request("running", 60s)).outcome, ClaimOutcome::k_claimed);
  EXPECT_EQ(m_ledger->archive(older_than(3600s)), 0);  // nothing that old
  backdate("done1");
  backdate("done2");
  EXPECT_EQ(m_ledger->archive(older_than(0s)), 2);
  EXPECT_EQ(m_ledger->lookup("done1").state, RowState::k_absent);
  EXPECT_EQ(m_ledger->lookup("running").state, RowState::k_in_flight);
  EXPECT_EQ(
      raw_value("SELECT count(*) FROM ledger_history", "SELECT count(*) FROM idem.ledger_history"),
      "2");
  Ledger::RowFilter archived;
  archived.work_key = "done1";
  const std::vector<LedgerRow> history = m_ledger->history(archived);
  ASSERT_EQ(history.size(), 1u);
  ASSERT_TRUE(history[0].fingerprint);
  EXPECT_EQ(history[0].fingerprint->members, with_members.members);  // the sidecars go along
  if (!is_sqlite()) {
    // One monthly partition holds them.
    EXPECT_EQ(pg_exec(m_admin.get(),
                      "SELECT count(*) FROM pg_inherits "
                      "WHERE inhparent = 'idem.ledger_history'::regclass"),
              "1");
  }
  EXPECT_EQ(m_ledger->archive(older_than(0s)), 0);
  // The primary key stays on work_key in the live table: the work can be done again.
  EXPECT_EQ(m_ledger->claim(make_request("done1", 60s)).outcome, ClaimOutcome::k_claimed);
}

TEST_P(LedgerConformance, DigestMissStartsThePostgisLoadAndTheClaimFollows) {
  FileIdentity identity;
  identity.inode = 42;
  identity.size = 7;
  EXPECT_FALSE(m_ledger->digest_cache().get("/data/miss.tif", identity));
  if (!is_sqlite() && with_postgis()) {
    // Sent without waiting: the backend loads PostGIS while the caller hashes the source.
    std::string last;
    for (int i = 0; i < 100 && last.find("WHERE false") == std::string::npos; ++i) {
      std::this_thread::sleep_for(10ms);
      last = pg_exec(m_admin.get(),
                     "SELECT coalesce(string_agg(query, ' '), '') FROM pg_stat_activity WHERE "
                     "application_name = 'gdal-idem' AND datname = current_database()");
    }
    EXPECT_EQ(last, "UPDATE idem.ledger SET footprint = $1 WHERE false");
  }
  m_ledger->digest_cache().put("/data/miss.tif", identity, "sha256_tree:ab");
  ClaimRequest request = make_request("after-miss", 60s);
  request.footprint_wkt = "POLYGON((0 0,1 0,1 1,0 1,0 0))";
  ASSERT_EQ(m_ledger->claim(request).outcome, ClaimOutcome::k_claimed);
  ASSERT_TRUE(m_ledger->complete("after-miss", request.claim_token, make_fingerprint(1)));
  EXPECT_EQ(m_ledger->lookup("after-miss").state, RowState::k_completed);
  EXPECT_EQ(m_ledger->digest_cache().get("/data/miss.tif", identity), "sha256_tree:ab");
  if (!is_sqlite() && with_postgis()) {
    EXPECT_EQ(pg_exec(m_admin.get(),
                      "SELECT ST_AsText(footprint) FROM idem.ledger WHERE work_key = 'after-miss'"),
              "MULTIPOLYGON(((0 0,1 0,1 1,0 1,0 0)))");
  }
}

TEST_P(LedgerConformance, DigestCacheHitsOnlyOnTheSameIdentity) {
  DigestCache& cache = m_ledger->digest_cache();
  FileIdentity identity;
  identity.device = UINT64_MAX - 5;  // unsigned values survive the signed column
  identity.inode = 1234567;
  identity.size = 10LL << 30;
  identity.mtime_ns = 1700000000123456789;
  identity.ctime_ns = 1700000000987654321;
  EXPECT_FALSE(cache.get("/data/scene.tif", identity));
  cache.put("/data/scene.tif", identity, "sha256:abc");
  EXPECT_EQ(cache.get("/data/scene.tif", identity), std::optional<std::string>("sha256:abc"));
  EXPECT_FALSE(cache.get("/data/other.tif", identity));
  FileIdentity touched = identity;
  touched.ctime_ns += 1;
  EXPECT_FALSE(cache.get("/data/scene.tif", touched));
  cache.put("/data/scene.tif", touched, "sha256:def");
  EXPECT_EQ(cache.get("/data/scene.tif", touched), std::optional<std::string>("sha256:def"));
  EXPECT_FALSE(cache.get("/data/scene.tif", identity));
  // Persistent: another connection sees it.
  auto other = Ledger::open(m_dsn);
  EXPECT_EQ(other->digest_cache().get("/data/scene.tif", touched),
            std::optional<std::string>("sha256:def"));
}

TEST_P(LedgerConformance, DigestCacheReadsManyPathsAtOnce) {
  DigestCache& cache = m_ledger->digest_cache();
  const FileIdentity memo{};  // what the CRS memo's entries are recorded with
  FileIdentity file;
  file.device = 7;
  file.inode = 99;
  file.size = 4096;
  // Paths an array literal must quote: a comma, braces, a double quote, a backslash, a space.
  const std::string odd = "idem-memo:a,b {c} \"d\" \\e";
  cache.put("idem-memo:one", memo, "id\tEPSG:4326\n");
  cache.put(odd, memo, "id\tEPSG:3857\n");
  cache.put("idem-memo:file", file, "sha256:other-identity");
  EXPECT_TRUE(cache.get_many({}).empty());
  const std::map<std::string, std::string> found = cache.get_many(
      {{"idem-memo:one", memo}, {odd, memo}, {"idem-memo:absent", memo}, {"idem-memo:file", memo}});
  const std::map<std::string, std::string> expected = {{"idem-memo:one", "id\tEPSG:4326\n"},
                                                       {odd, "id\tEPSG:3857\n"}};
  EXPECT_EQ(found, expected);
  // Each path with its own identity, in one call: a source file's digest with the memo's.
  EXPECT_EQ(cache.get_many({{"idem-memo:file", file}, {"idem-memo:one", memo}}),
            (std::map<std::string, std::string>{{"idem-memo:file", "sha256:other-identity"},
                                                {"idem-memo:one", "id\tEPSG:4326\n"}}));
  // Any field of the identity differing is a miss, as for get().
  const std::vector<std::function<void(FileIdentity&)>> changes = {
      [](FileIdentity& i) { ++i.device; }, [](FileIdentity& i) { ++i.inode; },
      [](FileIdentity& i) { ++i.size; }, [](FileIdentity& i) { ++i.mtime_ns; },
      [](FileIdentity& i) { ++i.ctime_ns; }};
  for (size_t field = 0; field < changes.size(); ++field) {
    FileIdentity changed = file;
    changes[field](changed);
    EXPECT_TRUE(cache.get_many({{"idem-memo:file", changed}}).empty()) << "field " << field;
    EXPECT_FALSE(cache.get("idem-memo:file", changed)) << "field " << field;
  }
  // Identities beyond int64 (device and inode are unsigned) compare bit for bit.
  FileIdentity big = file;
  big.device = ~uint64_t{0} - 5;
  big.inode = uint64_t{1} << 63;
  cache.put("idem-memo:big", big, "sha256:big");
  EXPECT_EQ(cache.get_many({{"idem-memo:big", big}}),
            (std::map<std::string, std::string>{{"idem-memo:big", "sha256:big"}}));
}

// DigestCache::read_ahead: get_many answers the same with or without it, whatever comes in
// between (other ledger calls, a lost connection); on PostgreSQL a get_many of paths all read
// ahead takes the answer sent ahead (the ledger's stats count it), any other asks again.
TEST_P(LedgerConformance, DigestReadAheadGivesTheSameAnswers) {
  DigestCache& cache = m_ledger->digest_cache();
  const FileIdentity memo{};
  FileIdentity file;
  file.device = 3;
  file.inode = 42;
  file.size = 10;
  cache.put("idem-memo:a", memo, "id\tEPSG:4326\n");
  cache.put("/data/src.tif", file, "sha256:src");
  const std::map<std::string, std::string> both = {{"idem-memo:a", "id\tEPSG:4326\n"},
                                                   {"/data/src.tif", "sha256:src"}};
  // Whether the get_many since the last call was answered by the query sent ahead.
  int64_t answered_before = m_ledger->stats().digest_lookups_answered_ahead;
  auto answered_ahead = [&] {
    const int64_t now = m_ledger->stats().digest_lookups_answered_ahead;
    const bool found = now > answered_before;
    answered_before = now;
    return found;
  };

  // Read ahead, then asked: the answer sent ahead serves (the identity still decides).
  cache.read_ahead({"idem-memo:a", "/data/src.tif", "idem-memo:absent"});
  EXPECT_EQ(
      cache.get_many({{"idem-memo:a", memo}, {"/data/src.tif", file}, {"idem-memo:absent", memo}}),
      both);
  EXPECT_EQ(answered_ahead(), !is_sqlite());
  FileIdentity changed = file;
  ++changed.mtime_ns;
  cache.read_ahead({"/data/src.tif"});
  EXPECT_TRUE(cache.get_many({{"/data/src.tif", changed}}).empty());
  EXPECT_EQ(answered_ahead(), !is_sqlite());

  // A claim in between collects the answer; the get_many after it still uses it.
  cache.read_ahead({"idem-memo:a", "/data/src.tif"});
  const ClaimRequest request = make_request("k1", 60s);
  EXPECT_EQ(m_ledger->claim(request).outcome, ClaimOutcome::k_claimed);
  EXPECT_EQ(cache.get_many({{"idem-memo:a", memo}, {"/data/src.tif", file}}), both);
  EXPECT_EQ(answered_ahead(), !is_sqlite());

  // A path not read ahead: asked again, all of them. An answer is used once.
  cache.read_ahead({"idem-memo:a"});
  EXPECT_EQ(cache.get_many({{"idem-memo:a", memo}, {"/data/src.tif", file}}), both);
  EXPECT_FALSE(answered_ahead());
  EXPECT_EQ(cache.get_many({{"idem-memo:a", memo}}),
            (std::map<std::string, std::string>{{"idem-memo:a", "id\tEPSG:4326\n"}}));
  EXPECT_FALSE(answered_ahead());

  // The connection lost after the query went out: the next get_many reconnects and answers.
  if (!is_sqlite()) {
    cache.read_ahead({"idem-memo:a", "/data/src.tif"});
    pg_exec(m_admin.get(),
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
            "application_name = 'gdal-idem' AND pid <> pg_backend_pid()");
    std::map<std::string, std::string> after;
    try {
      after = cache.get_many({{"idem-memo:a", memo}, {"/data/src.tif", file}});
    } catch (const Error&) {
      after = cache.get_many({{"idem-memo:a", memo}, {"/data/src.tif", file}});  // reconnects
    }
    EXPECT_EQ(after, both);
  }
}

TEST_P(LedgerConformance, MigrationsAreEmbeddedAndIdempotent) {
  const std::vector<Migration> all = migrations(m_ledger->backend_name());
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all.front().version, 1);
  EXPECT_EQ(all.front().name, "0001_init.sql");
  EXPECT_NE(all.front().sql.find("CREATE TABLE"), std::string::npos);
  const int version = m_ledger->schema_version();
  EXPECT_GE(version, 1);
  const MigrationReport again = m_ledger->migrate();
  EXPECT_TRUE(again.applied.empty());
  EXPECT_EQ(again.schema_version, version);
  auto reopened = Ledger::open(m_dsn);
  EXPECT_EQ(reopened->schema_version(), version);
  // Every migration applied, but those for an extension the database lacks (PostGIS).
  size_t applicable = 0;
  int highest = 0;
  for (const Migration& migration : all) {
    if (!migration.requires_extension || with_postgis()) {
      ++applicable;
      highest = migration.version;
    }
  }
  EXPECT_EQ(version, highest);
  EXPECT_EQ(
      raw_value("SELECT count(*) FROM schema_version", "SELECT count(*) FROM idem.schema_version"),
      std::to_string(applicable));
}

TEST_P(LedgerConformance, FootprintStoredOnlyWithPostgis) {
  ClaimRequest request = make_request("tile", 60s);
  request.footprint_wkt = "POLYGON((0 0,1 0,1 1,0 1,0 0))";
  ASSERT_EQ(m_ledger->claim(request).outcome, ClaimOutcome::k_claimed);
  ASSERT_TRUE(m_ledger->complete("tile", request.claim_token, make_fingerprint(1)));
  EXPECT_EQ(m_ledger->has_footprints(), with_postgis());
  if (is_sqlite()) {
    return;
  }
  const std::string column =
      pg_exec(m_admin.get(),
              "SELECT count(*) FROM information_schema.columns WHERE table_schema = 'idem' "
              "AND table_name = 'ledger' AND column_name = 'footprint'");
  if (!with_postgis()) {
    EXPECT_EQ(column, "0");
    return;
  }
  EXPECT_EQ(column, "1");
  EXPECT_EQ(pg_exec(m_admin.get(),
                    "SELECT ST_AsText(footprint) || ' ' || ST_SRID(footprint) "
                    "FROM idem.ledger WHERE work_key = 'tile'"),
            "MULTIPOLYGON(((0 0,1 0,1 1,0 1,0 0))) 4326");
  EXPECT_EQ(pg_exec(m_admin.get(),
                    "SELECT indexdef LIKE '%USING gist%' FROM pg_indexes WHERE schemaname = "
                    "'idem' AND indexname = 'ledger_footprint_gist'"),
            "t");
  // Footprints as GDAL writes them (MULTIPOLYGON, split at the antimeridian) or in any case,
  // from a connection whose search_path does not name PostGIS's schema.
  auto elsewhere = Ledger::open(m_dsn + " options='-c search_path=pg_catalog'");
  ClaimRequest split = make_request("split", 60s);
  split.footprint_wkt =
      "MULTIPOLYGON (((179 0,180 0,180 1,179 1,179 0)),((-180 0,-179 0,-179 1,-180 1,-180 0)))";
  ASSERT_EQ(elsewhere->claim(split).outcome, ClaimOutcome::k_claimed);
  ClaimRequest lower = make_request("lower", 60s);
  lower.footprint_wkt = " polygon ((0 0,2 0,2 2,0 2,0 0))";
  ASSERT_EQ(elsewhere->claim(lower).outcome, ClaimOutcome::k_claimed);
  EXPECT_EQ(pg_exec(m_admin.get(),
                    "SELECT string_agg(work_key || ':' || ST_NumGeometries(footprint) || ':' || "
                    "ST_SRID(footprint) || ':' || ST_Area(footprint), ' ' ORDER BY work_key) "
                    "FROM idem.ledger WHERE work_key IN ('split', 'lower')"),
            "lower:1:4326:4 split:2:4326:2");
  // Archived rows keep their footprint.
  EXPECT_EQ(m_ledger->archive(older_than(0s)), 1);
  EXPECT_EQ(pg_exec(m_admin.get(), "SELECT ST_SRID(footprint) FROM idem.ledger_history"), "4326");
}

TEST_P(LedgerConformance, CountsByStateAndScope) {
  auto add = [&](const std::string& key, const std::string& ns, std::chrono::seconds lease,
                 bool complete, const std::string& output = "") {
    ClaimRequest request = make_request(key, lease, output);
    request.namespace_name = ns;
    ASSERT_EQ(m_ledger->claim(request).outcome, ClaimOutcome::k_claimed);
    if (complete) {
      ASSERT_TRUE(m_ledger->complete(key, request.claim_token, make_fingerprint(1)));
    }
  };
  add("old", "alpha", 60s, true, "/out/shared.tif");
  add("new", "alpha", 60s, true, "/out/shared.tif");  // supersedes "old"
  add("live", "alpha", 60s, false);
  add("dead", "alpha", 1s, false);
  add("other", "beta", 60s, true);
  end_lease("dead");
  const LedgerCounts all = m_ledger->counts({});
  EXPECT_EQ(all.completed, 2);
  EXPECT_EQ(all.superseded, 1);
  EXPECT_EQ(all.in_flight, 1);
  EXPECT_EQ(all.stale, 1);
  EXPECT_EQ(all.completed_last_hour, 3);
  ASSERT_TRUE(all.oldest_in_flight_claimed_at);
  EXPECT_LE(*all.oldest_in_flight_claimed_at, m_ledger->now());
  Ledger::RowFilter beta;
  beta.namespace_name = "beta";
  const LedgerCounts only_beta = m_ledger->counts(beta);
  EXPECT_EQ(only_beta.completed, 1);
  EXPECT_EQ(only_beta.in_flight + only_beta.stale + only_beta.superseded, 0);
  EXPECT_FALSE(only_beta.oldest_in_flight_claimed_at);
}

TEST_P(LedgerConformance, KeyPrefixAndExactKeyFilters) {
  for (const char* key : {"abc1", "abc2", "abd3"}) {
    ASSERT_EQ(m_ledger->claim(make_request(key, 60s)).outcome, ClaimOutcome::k_claimed);
  }
  Ledger::RowFilter prefix;
  prefix.work_key_prefix = "abc";
  EXPECT_EQ(m_ledger->rows(prefix).size(), 2u);
  prefix.work_key_prefix = "abd";
  EXPECT_EQ(m_ledger->rows(prefix).size(), 1u);
  Ledger::RowFilter exact;
  exact.work_key = "abc2";
  ASSERT_EQ(m_ledger->rows(exact).size(), 1u);
  EXPECT_EQ(m_ledger->rows(exact)[0].work_key, "abc2");
}

TEST_P(LedgerConformance, ForgetRowsReturnsWhatItDeleted) {
  auto add = [&](const std::string& key, const std::string& ns, const std::string& layer) {
    ClaimRequest request = make_request(key, 60s);
    request.namespace_name = ns;
    request.layer = layer;
    ASSERT_EQ(m_ledger->claim(request).outcome, ClaimOutcome::k_claimed);
  };
  add("k1", "alpha", "dem");
  add("k2", "alpha", "rgb");
  add("k3", "beta", "dem");
  EXPECT_THROW(m_ledger->forget_rows({}), Error);
  Ledger::RowFilter filter;
  filter.namespace_name = "alpha";
  filter.layer = "dem";
  const std::vector<LedgerRow> gone = m_ledger->forget_rows(filter);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].work_key, "k1");
  EXPECT_EQ(gone[0].output_uri, "/data/out/k1.tif");
  EXPECT_EQ(m_ledger->lookup("k1").state, RowState::k_absent);
  Ledger::RowFilter by_key;
  by_key.work_key = "k3";
  EXPECT_EQ(m_ledger->forget_rows(by_key).size(), 1u);
  EXPECT_EQ(m_ledger->lookup("k2").state, RowState::k_in_flight);
}

TEST_P(LedgerConformance, ForgetCompletedIsFencedOnTheCheckedCompletion) {
  ClaimRequest request = make_request("done", 1s);
  ASSERT_EQ(m_ledger->claim(request).outcome, ClaimOutcome::k_claimed);
  EXPECT_FALSE(m_ledger->forget_completed("done", request.claim_token));  // not completed yet
  ASSERT_TRUE(m_ledger->complete("done", request.claim_token, make_fingerprint(1)));
  EXPECT_FALSE(m_ledger->forget_completed("done", "another-token"));
  EXPECT_TRUE(m_ledger->forget_completed("done", request.claim_token));
  EXPECT_EQ(m_ledger->lookup("done").state, RowState::k_absent);
}

TEST_P(LedgerConformance, ArchiveSupersededOrByNamespaceAndReadHistory) {
  auto add = [&](const std::string& key, const std::string& ns, const std::string& output) {
    ClaimRequest request = make_request(key, 60s, output);
    request.namespace_name = ns;
    ASSERT_EQ(m_ledger->claim(request).outcome, ClaimOutcome::k_claimed);
    ASSERT_TRUE(m_ledger->complete(key, request.claim_token, make_fingerprint(7)));
  };
  add("first", "alpha", "/out/a.tif");
  backdate("first");
  add("second", "alpha", "/out/a.tif");
  add("beta1", "beta", "/out/b.tif");
  ArchiveRequest superseded;
  superseded.superseded_only = true;
  EXPECT_EQ(m_ledger->archive(superseded), 1);
  EXPECT_EQ(m_ledger->lookup("first").state, RowState::k_absent);
  EXPECT_EQ(m_ledger->lookup("second").state, RowState::k_completed);
  Ledger::RowFilter by_output;
  by_output.output_uri = "/out/a.tif";
  const std::vector<LedgerRow> history = m_ledger->history(by_output);
  ASSERT_EQ(history.size(), 1u);
  EXPECT_EQ(history[0].work_key, "first");
  EXPECT_EQ(history[0].state, RowState::k_completed);
  EXPECT_TRUE(history[0].superseded_at);
  EXPECT_EQ(history[0].work_json, "{\"key\":\"first\"}");
  ASSERT_TRUE(history[0].fingerprint);
  EXPECT_EQ(history[0].fingerprint->size, 7);
  Ledger::RowFilter prefix;
  prefix.work_key_prefix = "fir";
  EXPECT_EQ(m_ledger->history(prefix).size(), 1u);

  ArchiveRequest old_beta;
  old_beta.namespace_name = "beta";
  old_beta.older_than = 3600s;
  EXPECT_EQ(m_ledger->archive(old_beta), 0);
  old_beta.older_than = 0s;
  backdate("beta1");
  EXPECT_EQ(m_ledger->archive(old_beta), 1);
  EXPECT_EQ(m_ledger->lookup("second").state, RowState::k_completed);
  EXPECT_EQ(m_ledger->history({}).size(), 2u);
  EXPECT_EQ(m_ledger->drop_history(3600s, std::nullopt), 0);
  EXPECT_EQ(m_ledger->drop_history(0s, std::string("beta")), 1);
  EXPECT_EQ(m_ledger->drop_history(0s, std::nullopt), 1);
  EXPECT_TRUE(m_ledger->history({}).empty());
}

TEST_P(LedgerConformance, HeartbeatFromAnotherThreadIsSafe) {
  const ClaimRequest request = make_request("k1", 60s);
  ASSERT_EQ(m_ledger->claim(request).outcome, ClaimOutcome::k_claimed);
  std::atomic<bool> stop{false};
  std::atomic<int> renewed{0};
  std::thread heartbeat([&] {
    while (!stop) {
      if (m_ledger->heartbeat("k1", request.claim_token, 60s)) {
        ++renewed;
      }
    }
  });
  for (int i = 0; i < 200; ++i) {
    EXPECT_EQ(m_ledger->lookup("k1").state, RowState::k_in_flight);
    EXPECT_EQ(m_ledger->claim(make_request("other" + std::to_string(i), 60s)).outcome,
              ClaimOutcome::k_claimed);
  }
  stop = true;
  heartbeat.join();
  EXPECT_GT(renewed.load(), 0);
  EXPECT_TRUE(m_ledger->complete("k1", request.claim_token, make_fingerprint(1)));
}

// ---- Completion inside a caller's transaction (feature loads) ---------------------------

TEST_P(LedgerConformance, DatabaseIdentityNamesThePostgresDatabaseOnly) {
  if (is_sqlite()) {
    EXPECT_FALSE(m_ledger->database_identity());
    return;
  }
  const std::optional<std::string> identity = m_ledger->database_identity();
  ASSERT_TRUE(identity);
  ledger_test::PgHandle same = ledger_test::pg_connect(m_dsn);
  ASSERT_TRUE(same);
  EXPECT_EQ(database_identity_of(same.get()), *identity);
  const std::string other_database =
      with_postgis() ? ledger_test::k_nogis_database : ledger_test::k_gis_database;
  ledger_test::PgHandle other = ledger_test::pg_connect(ledger_test::pg_dsn_for(other_database));
  ASSERT_TRUE(other);
  EXPECT_NE(database_identity_of(other.get()), *identity);
}

TEST_P(LedgerConformance, CompleteInTransactionCommitsAndRollsBackWithTheCaller) {
  const ClaimRequest request = make_request("k1", 60s);
  ASSERT_EQ(m_ledger->claim(request).outcome, ClaimOutcome::k_claimed);
  if (is_sqlite()) {
    EXPECT_THROW(complete_in_transaction(*m_ledger, nullptr, "k1", request.claim_token,
                                         make_fingerprint(3), 3),
                 Error);
    EXPECT_EQ(m_ledger->lookup("k1").state, RowState::k_in_flight);
    return;
  }
  ledger_test::PgHandle caller = ledger_test::pg_connect(m_dsn);
  ASSERT_TRUE(caller);
  // Outside a transaction the completion would commit alone: refused.
  EXPECT_THROW(complete_in_transaction(*m_ledger, caller.get(), "k1", request.claim_token,
                                       make_fingerprint(3), 3),
               Error);
  pg_exec(caller.get(), "BEGIN");
  EXPECT_FALSE(complete_in_transaction(*m_ledger, caller.get(), "k1", random_token(),
                                       make_fingerprint(3), 3));
  EXPECT_TRUE(complete_in_transaction(*m_ledger, caller.get(), "k1", request.claim_token,
                                      make_fingerprint(3), 3));
  EXPECT_EQ(m_ledger->lookup("k1").state, RowState::k_in_flight);  // not committed yet
  pg_exec(caller.get(), "ROLLBACK");
  EXPECT_EQ(m_ledger->lookup("k1").state, RowState::k_in_flight);
  pg_exec(caller.get(), "BEGIN");
  EXPECT_TRUE(complete_in_transaction(*m_ledger, caller.get(), "k1", request.claim_token,
                                      make_fingerprint(4), 4));
  pg_exec(caller.get(), "COMMIT");
  const LedgerRow row = m_ledger->lookup("k1");
  EXPECT_EQ(row.state, RowState::k_completed);
  EXPECT_EQ(row.feature_count, 4);
  EXPECT_EQ(row.fingerprint->size, 4);
  // A retry of a completion that committed: true, nothing changes; a foreign token: false.
  pg_exec(caller.get(), "BEGIN");
  EXPECT_TRUE(complete_in_transaction(*m_ledger, caller.get(), "k1", request.claim_token,
                                      make_fingerprint(5), 5));
  EXPECT_FALSE(complete_in_transaction(*m_ledger, caller.get(), "k1", random_token(),
                                       make_fingerprint(5), 5));
  pg_exec(caller.get(), "COMMIT");
  EXPECT_EQ(m_ledger->lookup("k1").feature_count, 4);
}

TEST_P(LedgerConformance, CompleteInTransactionRefusesAnotherDatabase) {
  if (is_sqlite()) {
    GTEST_SKIP() << "SQLite has no caller transactions (see the test above)";
  }
  const ClaimRequest request = make_request("k1", 60s);
  ASSERT_EQ(m_ledger->claim(request).outcome, ClaimOutcome::k_claimed);
  const std::string other_database =
      with_postgis() ? ledger_test::k_nogis_database : ledger_test::k_gis_database;
  ledger_test::PgHandle other = ledger_test::pg_connect(ledger_test::pg_dsn_for(other_database));
  ASSERT_TRUE(other);
  pg_exec(other.get(), "BEGIN");
  EXPECT_THROW(complete_in_transaction(*m_ledger, other.get(), "k1", request.claim_token,
                                       make_fingerprint(3), 3),
               Error);
  pg_exec(other.get(), "ROLLBACK");
  EXPECT_EQ(m_ledger->lookup("k1").state, RowState::k_in_flight);
}

INSTANTIATE_TEST_SUITE_P(Backends, LedgerConformance,
                         ::testing::Values("sqlite", "postgresql", "postgresql_nogis"),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           return param_info.param;
                         });

// ---- Backend-specific behaviour -----------------------------------------------------------

TEST(LedgerDsn, RedactionHidesPasswordsInUrisAndKeywordStrings) {
  EXPECT_EQ(Ledger::redact_dsn("postgresql://etl:s3cret@db.example:5432/ledger?sslmode=require"),
            "postgresql://etl:XXXX@db.example:5432/ledger?sslmode=require");
  EXPECT_EQ(Ledger::redact_dsn("postgres://etl@db/ledger?password=s3cret&sslmode=verify-full"),
            "postgres://etl@db/ledger?password=XXXX&sslmode=verify-full");
  EXPECT_EQ(Ledger::redact_dsn("host=db dbname=ledger password=s3cret user=etl"),
            "host=db dbname=ledger password=XXXX user=etl");
  EXPECT_EQ(Ledger::redact_dsn("host=db password = 'it\\'s s3cret' user=etl"),
            "host=db password = XXXX user=etl");
  EXPECT_EQ(Ledger::redact_dsn("host=db password='unterminated s3cret").find("s3cret"),
            std::string::npos);
  EXPECT_EQ(Ledger::redact_dsn("sqlite:/tmp/ledger.sqlite"), "sqlite:/tmp/ledger.sqlite");
}

// GSSAPI encryption is negotiated only with servers off this machine: libpq's default looks for
// Kerberos credentials on every connection first (docs/operations.md, "PostgreSQL connection
// costs"). What the DSN or the environment chooses stands.
TEST(LedgerDsn, GssEncryptionSkippedOnlyForLoopbackHostsLeftToTheDefault) {
  using ledger_detail::skip_gss_encryption;
  // The test cluster's environment (pg_virtualenv sets PGHOST) is restored for later tests.
  struct SavedEnvironment {
    std::map<std::string, std::optional<std::string>> values;
    ~SavedEnvironment() {
      for (const auto& [name, value] : values) {
        value ? setenv(name.c_str(), value->c_str(), 1) : unsetenv(name.c_str());
      }
    }
  } saved;
  for (const char* name : {"PGGSSENCMODE", "PGSERVICE", "PGHOST"}) {
    const char* value = std::getenv(name);
    saved.values[name] = value ? std::optional<std::string>(value) : std::nullopt;
    unsetenv(name);
  }
  EXPECT_TRUE(skip_gss_encryption("host=127.0.0.1 port=6432 dbname=tiles user=worker"));
  EXPECT_TRUE(skip_gss_encryption("postgresql://worker@127.0.0.1:6432/tiles"));
  EXPECT_TRUE(skip_gss_encryption("postgresql://worker@localhost/tiles?connect_timeout=5"));
  EXPECT_TRUE(skip_gss_encryption("host=::1 dbname=tiles"));
  EXPECT_TRUE(skip_gss_encryption("host=localhost,127.0.0.2 dbname=tiles"));
  EXPECT_TRUE(skip_gss_encryption("host=/var/run/postgresql dbname=tiles"));
  // hostaddr is where libpq connects, whatever host says.
  EXPECT_TRUE(skip_gss_encryption("host=db.example hostaddr=127.0.0.1 dbname=tiles"));
  EXPECT_FALSE(skip_gss_encryption("host=127.0.0.1 hostaddr=10.1.2.3 dbname=tiles"));

  EXPECT_FALSE(skip_gss_encryption("host=db.example dbname=tiles"));
  EXPECT_FALSE(skip_gss_encryption("postgresql://worker@db.example:6432/tiles"));
  EXPECT_FALSE(skip_gss_encryption("host=127.0.0.1,db.example dbname=tiles"));
  EXPECT_FALSE(skip_gss_encryption("host=127.0.0.1 gssencmode=prefer dbname=tiles"));
  EXPECT_FALSE(skip_gss_encryption("postgresql://127.0.0.1/tiles?gssencmode=require"));
  EXPECT_FALSE(skip_gss_encryption("service=tiles"));
  EXPECT_FALSE(skip_gss_encryption("dbname=tiles"));  // the default Unix socket: nothing to skip
  EXPECT_FALSE(skip_gss_encryption("host='unterminated"));

  setenv("PGHOST", "127.0.0.1", 1);
  EXPECT_TRUE(skip_gss_encryption("dbname=tiles"));
  EXPECT_FALSE(skip_gss_encryption("host=db.example dbname=tiles"));  // the DSN's host wins
  setenv("PGGSSENCMODE", "prefer", 1);
  EXPECT_FALSE(skip_gss_encryption("dbname=tiles"));
  EXPECT_FALSE(skip_gss_encryption("host=127.0.0.1 dbname=tiles"));
  unsetenv("PGGSSENCMODE");
  setenv("PGSERVICE", "tiles", 1);
  EXPECT_FALSE(skip_gss_encryption("host=127.0.0.1 dbname=tiles"));
}

TEST(LedgerDsn, BackendAndDefaultPath) {
  EXPECT_EQ(Ledger::backend_of(""), "sqlite");
  EXPECT_EQ(Ledger::backend_of("sqlite:/x/ledger.sqlite"), "sqlite");
  EXPECT_EQ(Ledger::backend_of("postgresql://db/ledger"), "postgresql");
  EXPECT_EQ(Ledger::backend_of("service=ledger"), "postgresql");
  setenv("XDG_STATE_HOME", "/var/state", 1);
  EXPECT_EQ(Ledger::default_sqlite_path(), "/var/state/gdal-idem/ledger.sqlite");
  unsetenv("XDG_STATE_HOME");
  setenv("HOME", "/home/etl", 1);
  EXPECT_EQ(Ledger::default_sqlite_path(), "/home/etl/.local/state/gdal-idem/ledger.sqlite");
}

TEST(LedgerSqlite, DefaultLedgerIsCreatedUnderTheStateDirectory) {
  ledger_test::TempDir dir;
  setenv("XDG_STATE_HOME", dir.path().c_str(), 1);
  {
    auto ledger = Ledger::open("");
    EXPECT_EQ(ledger->backend_name(), "sqlite");
    EXPECT_EQ(ledger->claim(make_request("k", 60s)).outcome, ClaimOutcome::k_claimed);
  }
  unsetenv("XDG_STATE_HOME");
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/gdal-idem/ledger.sqlite"));
}

// Workers of a batch often open a ledger file that does not exist yet, all at once. Turning the new
// file to WAL needs SQLite's write lock taken from a read lock, which fails at once (no busy
// handler: two such upgrades would deadlock) when another connection does the same: every open
// must wait for the others instead of failing with "database is locked".
TEST(LedgerSqlite, WorkersOpeningANewLedgerAtOnceAllOpenIt) {
  constexpr int k_workers = 8;
  for (int round = 0; round < 20; ++round) {
    ledger_test::TempDir dir;
    const std::string dsn = "sqlite:" + dir.path() + "/ledger.sqlite";
    std::atomic<int> ready{0};
    std::vector<std::future<std::string>> opened;
    for (int worker = 0; worker < k_workers; ++worker) {
      opened.push_back(std::async(std::launch::async, [&, worker] {
        ready.fetch_add(1);
        while (ready.load() < k_workers) {
          std::this_thread::yield();
        }
        try {
          auto ledger = Ledger::open(dsn);
          const std::string key = "k" + std::to_string(worker);
          return ledger->claim(make_request(key, 60s)).outcome == ClaimOutcome::k_claimed
                     ? std::string()
                     : "not claimed: " + key;
        } catch (const Error& error) {
          return std::string(error.what());
        }
      }));
    }
    for (auto& result : opened) {
      ASSERT_EQ(result.get(), "") << "round " << round;
    }
    auto ledger = Ledger::open(dsn);
    EXPECT_EQ(ledger->rows(LedgerRowFilter{}).size(), static_cast<size_t>(k_workers));
  }
}

TEST(LedgerSqlite, UnwritableLocationGivesLedgerError) {
  try {
    Ledger::open("sqlite:/proc/idem-cannot-exist/ledger.sqlite");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::k_ledger);
  }
}

class LedgerPostgres : public ::testing::Test {
 protected:
  void SetUp() override { IDEM_REQUIRE_PG_OR_SKIP(); }
};

void expect_ledger_error_without(const std::string& dsn, const std::string& secret,
                                 const std::string& expected_fragment) {
  try {
    Ledger::open(dsn);
    ADD_FAILURE() << "expected an error for " << Ledger::redact_dsn(dsn);
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::k_ledger);
    const std::string message = error.what();
    EXPECT_EQ(message.find(secret), std::string::npos) << message;
    EXPECT_NE(message.find(expected_fragment), std::string::npos) << message;
    EXPECT_NE(message.find("XXXX"), std::string::npos) << message;
  }
}

// libpq quotes a DSN it cannot parse in its message; the password is masked all the same.
TEST(LedgerDsn, UnparsableDsnsNeverShowTheirPassword) {
  const std::vector<std::string> dsns = {
      "postgresql://u:S3cretPW@[::1/ledger",          "postgresql://u:S3cret%50W@[::1/ledger",
      "postgres://u@[::1/ledger?password=S3cretPW&x", "host=db password='S3cretPW",
      "host=db password = 'S3cret\\'PW' port=x",      "host=[::1 password=S3cretPW",
      "password=S3cretPW port=notaport host=db",
  };
  for (const std::string& dsn : dsns) {
    try {
      Ledger::open(dsn);
      ADD_FAILURE() << "expected an error for " << Ledger::redact_dsn(dsn);
    } catch (const Error& error) {
      const std::string message = error.what();
      EXPECT_EQ(message.find("S3cret"), std::string::npos) << message;
      EXPECT_EQ(message.find("PW"), std::string::npos) << message;
    }
    EXPECT_EQ(Ledger::redact_dsn(dsn).find("S3cret"), std::string::npos) << dsn;
  }
  EXPECT_EQ(Ledger::redact_dsn("host=db password=s3cret"), "host=db password=XXXX");
  EXPECT_EQ(scrub_secrets("a 'S3cret\\'PW' b", dsn_secrets("password='S3cret\\'PW'")), "a XXXX b");
}

TEST_F(LedgerPostgres, ServerDownGivesClearErrorWithoutPassword) {
  expect_ledger_error_without(
      "host=127.0.0.1 port=1 dbname=ledger user=etl password=Tr0ub4dor connect_timeout=3",
      "Tr0ub4dor", "cannot connect to the PostgreSQL ledger");
  expect_ledger_error_without("postgresql://etl:Tr0ub4dor@127.0.0.1:1/ledger?connect_timeout=3",
                              "Tr0ub4dor", "Connection refused");
}

TEST_F(LedgerPostgres, WrongPasswordGivesClearErrorWithoutPassword) {
  // The test cluster's server, a user that does not exist, a password that must not leak.
  expect_ledger_error_without(
      ledger_test::pg_base_dsn() + " user=idem_nobody password=Corr3ctHorse", "Corr3ctHorse",
      "idem_nobody");
}

TEST_F(LedgerPostgres, LostConnectionIsAClearErrorAndTheNextCallReconnects) {
  ledger_test::PgTestLock lock;
  ASSERT_TRUE(lock.ok());
  const std::string dsn = ledger_test::pg_dsn_for(ledger_test::k_gis_database);
  auto admin = ledger_test::pg_connect(dsn);
  ASSERT_TRUE(admin);
  auto ledger = Ledger::open(dsn);
  const ClaimRequest request = make_request("lost-" + random_token(), 60s);
  ASSERT_EQ(ledger->claim(request).outcome, ClaimOutcome::k_claimed);
  // A call after the claim reads the answer of the completion's PREPARE sent ahead, so that the
  // connection is idle when it is cut: a loss found while reading that answer, before the next
  // call sends anything, is reconnected without an error (nothing of that call was sent).
  ASSERT_EQ(ledger->lookup(request.work_key).state, RowState::k_in_flight);
  // With a timeout, pg_terminate_backend returns once the backend has exited (PostgreSQL 14+).
  pg_exec(admin.get(),
          "SELECT pg_terminate_backend(pid, 30000) FROM pg_stat_activity "
          "WHERE application_name = 'gdal-idem' AND pid <> pg_backend_pid()");
  try {
    ledger->heartbeat(request.work_key, request.claim_token, 60s);
    ADD_FAILURE() << "expected a lost connection";
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), ErrorKind::k_ledger);
    EXPECT_NE(std::string(error.what()).find("was lost"), std::string::npos) << error.what();
  }
  EXPECT_TRUE(ledger->heartbeat(request.work_key, request.claim_token, 60s));
  EXPECT_TRUE(ledger->complete(request.work_key, request.claim_token, make_fingerprint(1)));
}

TEST_F(LedgerPostgres, WorkerRoleCanRunWorkButNotChangeTheSchema) {
  ledger_test::PgTestLock lock;
  ASSERT_TRUE(lock.ok());
  const std::string dsn = ledger_test::pg_dsn_for(ledger_test::k_nogis_database);
  auto admin = ledger_test::pg_connect(dsn);
  ASSERT_TRUE(admin);
  pg_exec(admin.get(), "SET client_min_messages = warning");
  pg_exec(admin.get(), "DROP SCHEMA IF EXISTS idem CASCADE");
  pg_exec(admin.get(),
          "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = "
          "'idem_test_worker') THEN CREATE ROLE idem_test_worker LOGIN PASSWORD "
          "'W0rkerPass'; END IF; END $$");
  const std::string worker_dsn = dsn + " user=idem_test_worker password=W0rkerPass";
  // Uninitialised schema and no rights to create it (no CREATE on the database): a clear error.
  expect_ledger_error_without(worker_dsn, "W0rkerPass", "gdal-idem init");

  auto owner = Ledger::open(dsn);  // init as the owner
  pg_exec(admin.get(), read_text(std::string(IDEM_SQL_DIR) + "/postgres/worker_role.sql"));
  pg_exec(admin.get(), "GRANT idem_worker TO idem_test_worker");
  auto worker = Ledger::open(worker_dsn);
  const ClaimRequest request = make_request("role", 60s);
  ASSERT_EQ(worker->claim(request).outcome, ClaimOutcome::k_claimed);
  EXPECT_TRUE(worker->heartbeat("role", request.claim_token, 60s));
  EXPECT_TRUE(worker->complete("role", request.claim_token, make_fingerprint(1)));
  worker->digest_cache().put("/x", FileIdentity{}, "d");
  EXPECT_EQ(worker->rows({}).size(), 1U);
  EXPECT_THROW(worker->archive(older_than(0s)), Error);  // retention is the owner's job

  // A migration is pending (the owner has not run `init` since an upgrade): the worker cannot
  // apply it and keeps working on the schema as it is; the owner's next open applies it.
  const int version = owner->schema_version();
  pg_exec(admin.get(), "DROP INDEX idem.ledger_in_flight_or_retried_idx");
  pg_exec(admin.get(), "DELETE FROM idem.schema_version WHERE version = 3");
  auto behind = Ledger::open(worker_dsn);
  EXPECT_EQ(pg_exec(admin.get(),
                    "SELECT count(*) FROM pg_indexes WHERE schemaname = 'idem' "
                    "AND indexname = 'ledger_in_flight_or_retried_idx'"),
            "0");  // the worker could not apply it
  const ClaimRequest more = make_request("role2", 60s);
  ASSERT_EQ(behind->claim(more).outcome, ClaimOutcome::k_claimed);
  EXPECT_TRUE(behind->complete("role2", more.claim_token, make_fingerprint(1)));
  EXPECT_EQ(Ledger::open(dsn)->schema_version(), version);
  EXPECT_EQ(pg_exec(admin.get(),
                    "SELECT count(*) FROM pg_indexes WHERE schemaname = 'idem' "
                    "AND indexname = 'ledger_in_flight_or_retried_idx'"),
            "1");

  // A migration whose column every statement names cannot be left pending: the worker says so.
  pg_exec(admin.get(), "ALTER TABLE idem.ledger DROP COLUMN output_members");
  pg_exec(admin.get(), "ALTER TABLE idem.ledger_history DROP COLUMN output_members");
  pg_exec(admin.get(), "DELETE FROM idem.schema_version WHERE version = 4");
  try {
    Ledger::open(worker_dsn);
    ADD_FAILURE() << "a worker opened a ledger without the output_members column";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("gdal-idem init"), std::string::npos) << error.what();
  }
  EXPECT_EQ(Ledger::open(dsn)->schema_version(), version);  // the owner applies it
  pg_exec(admin.get(), "DROP SCHEMA idem CASCADE");
}

// A database of its own for a test that changes its extensions, dropped at the end.
class ScratchDatabase {
 public:
  explicit ScratchDatabase(const std::string& name)
      : m_name(name), m_base(ledger_test::pg_connect(ledger_test::pg_base_dsn())) {
    if (m_base) {
      pg_exec(m_base.get(), "SET client_min_messages = warning");
      pg_exec(m_base.get(), "DROP DATABASE IF EXISTS " + m_name);
      pg_exec(m_base.get(), "CREATE DATABASE " + m_name);
    }
  }
  ~ScratchDatabase() {
    if (m_base) {
      pg_exec(m_base.get(), "DROP DATABASE " + m_name);
    }
  }
  bool ok() const { return static_cast<bool>(m_base); }
  std::string dsn() const { return ledger_test::pg_dsn_for(m_name); }

 private:
  std::string m_name;
  ledger_test::PgHandle m_base;
};

TEST_F(LedgerPostgres, FootprintsStartWhenPostgisArrivesUnderAnOpenLedger) {
  ledger_test::PgTestLock lock;
  ASSERT_TRUE(lock.ok());
  ScratchDatabase database("idem_ledger_test_late_gis");
  ASSERT_TRUE(database.ok());
  const std::string dsn = database.dsn();
  {
    auto ledger = Ledger::open(dsn);
    EXPECT_FALSE(ledger->has_footprints());
    // Claims enough to have the claim statement prepared on this connection.
    for (const char* key : {"before1", "before2", "before3"}) {
      ClaimRequest request = make_request(key, 60s);
      request.footprint_wkt = "POLYGON((0 0,1 0,1 1,0 1,0 0))";
      ASSERT_EQ(ledger->claim(request).outcome, ClaimOutcome::k_claimed);
    }
    auto admin = ledger_test::pg_connect(dsn);
    ASSERT_TRUE(admin);
    pg_exec(admin.get(), "SET client_min_messages = warning");
    pg_exec(admin.get(), "CREATE EXTENSION postgis");
    const MigrationReport report = ledger->migrate();
    EXPECT_EQ(report.applied, std::vector<std::string>{"0002_footprint.sql"});
    EXPECT_TRUE(ledger->has_footprints());
    ClaimRequest request = make_request("after", 60s);
    request.footprint_wkt = "POLYGON((0 0,1 0,1 1,0 1,0 0))";
    ASSERT_EQ(ledger->claim(request).outcome, ClaimOutcome::k_claimed);
    ASSERT_TRUE(ledger->complete("after", request.claim_token, make_fingerprint(1)));
    EXPECT_EQ(pg_exec(admin.get(),
                      "SELECT ST_AsText(footprint) FROM idem.ledger "
                      "WHERE work_key = 'after'"),
              "MULTIPOLYGON(((0 0,1 0,1 1,0 1,0 0)))");
    // A claim without a footprint still works on the footprint schema.
    ASSERT_EQ(ledger->claim(make_request("bare", 60s)).outcome, ClaimOutcome::k_claimed);
  }
}

// An administrator drops PostGIS with CASCADE (which drops the footprint column) and maybe
// creates it again: claims go on without footprints, and `gdal-idem init` restores the column.
TEST_F(LedgerPostgres, ClaimsGoOnWhenPostgisIsDroppedAndInitRestoresFootprints) {
  ledger_test::PgTestLock lock;
  ASSERT_TRUE(lock.ok());
  ScratchDatabase database("idem_ledger_test_gis_dropped");
  ASSERT_TRUE(database.ok());
  const std::string dsn = database.dsn();
  {
    auto admin = ledger_test::pg_connect(dsn);
    ASSERT_TRUE(admin);
    pg_exec(admin.get(), "SET client_min_messages = warning");
    pg_exec(admin.get(), "CREATE EXTENSION postgis");
    auto claim_with_footprint = [](Ledger& ledger, const std::string& key) {
      ClaimRequest request = make_request(key, 60s);
      request.footprint_wkt = "POLYGON((0 0,1 0,1 1,0 1,0 0))";
      const ClaimResult result = ledger.claim(request);
      EXPECT_EQ(result.outcome, ClaimOutcome::k_claimed) << key;
      EXPECT_TRUE(ledger.complete(key, request.claim_token, make_fingerprint(1))) << key;
    };
    auto running = Ledger::open(dsn);  // a worker that stays up through all of this
    ASSERT_TRUE(running->has_footprints());
    claim_with_footprint(*running, "before");

    pg_exec(admin.get(), "DROP EXTENSION postgis CASCADE");
    claim_with_footprint(*running, "running-after-drop");
    auto fresh = Ledger::open(dsn);
    EXPECT_FALSE(fresh->has_footprints());
    claim_with_footprint(*fresh, "fresh-after-drop");
    EXPECT_EQ(fresh->archive(older_than(0s)), 3);

    pg_exec(admin.get(), "CREATE EXTENSION postgis");
    auto recreated = Ledger::open(dsn);  // PostGIS is back, the column is not
    claim_with_footprint(*recreated, "after-recreate");
    claim_with_footprint(*running, "running-after-recreate");
    EXPECT_EQ(Ledger::open(dsn)->archive(older_than(0s)), 2);  // `gdal-idem prune`
    ArchiveRequest everything;
    EXPECT_EQ(Ledger::open(dsn)->archive(everything), 0);

    const MigrationReport report = Ledger::open(dsn)->migrate();  // `gdal-idem init`
    EXPECT_EQ(report.applied, std::vector<std::string>{"0002_footprint.sql"});
    auto restored = Ledger::open(dsn);
    EXPECT_TRUE(restored->has_footprints());
    claim_with_footprint(*restored, "restored");
    EXPECT_EQ(pg_exec(admin.get(),
                      "SELECT ST_AsText(footprint) FROM idem.ledger "
                      "WHERE work_key = 'restored'"),
              "MULTIPOLYGON(((0 0,1 0,1 1,0 1,0 0)))");
    EXPECT_EQ(pg_exec(admin.get(), "SELECT count(*) FROM idem.ledger"), "1");
    EXPECT_EQ(pg_exec(admin.get(), "SELECT count(*) FROM idem.ledger_history"), "5");
  }
}

// Ledger::preopen: the connection started ahead is what open() uses, also on a database without
// the idem schema (the schema query sent ahead fails and open() creates the schema), after any
// number of advance_preopened() calls; an error is the one a connection made by open() gives.
TEST_F(LedgerPostgres, OpenUsesTheConnectionStartedAhead) {
  ledger_test::PgTestLock lock;
  ASSERT_TRUE(lock.ok());
  ScratchDatabase database("idem_ledger_test_preopen");
  ASSERT_TRUE(database.ok());
  const std::string dsn = database.dsn();
  auto admin = ledger_test::pg_connect(dsn);
  ASSERT_TRUE(admin);
  const std::string ours =
      "SELECT count(*) FROM pg_stat_activity WHERE datname = "
      "'idem_ledger_test_preopen' AND application_name = 'gdal-idem'";
  Ledger::preopen(dsn);
  for (int i = 0; i < 200 && pg_exec(admin.get(), ours) != "1"; ++i) {
    Ledger::advance_preopened();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(pg_exec(admin.get(), ours), "1");  // connected before open() was called
  {
    auto ledger = Ledger::open(dsn);
    EXPECT_EQ(pg_exec(admin.get(), ours), "1");  // and that connection is the one open() uses
    EXPECT_GT(ledger->schema_version(), 0);
    ClaimRequest request = make_request("ahead", 60s);
    ASSERT_EQ(ledger->claim(request).outcome, ClaimOutcome::k_claimed);
    ASSERT_TRUE(ledger->complete("ahead", request.claim_token, make_fingerprint(1)));
  }
  // An initialised schema: the answer sent ahead is used as it is.
  Ledger::preopen(dsn);
  auto again = Ledger::open(dsn);
  EXPECT_EQ(again->lookup("ahead").state, RowState::k_completed);

  // A port with nobody listening: the same message with and without the connection ahead.
  const std::string refused = "host=127.0.0.1 port=9 dbname=idem user=idem password=s3cretpw";
  auto message_of = [](const std::string& target) {
    try {
      Ledger::open(target);
    } catch (const Error& error) {
      return std::string(error.what());
    }
    return std::string("opened");
  };
  const std::string direct = message_of(refused);
  Ledger::preopen(refused);
  const std::string ahead = message_of(refused);
  EXPECT_EQ(ahead, direct);
  EXPECT_NE(ahead.find("cannot connect to the PostgreSQL ledger"), std::string::npos);
  EXPECT_EQ(ahead.find("s3cretpw"), std::string::npos);
}

}  // namespace
}  // namespace idem
