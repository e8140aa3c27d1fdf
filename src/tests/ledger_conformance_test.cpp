// SPDX-License-Identifier: MIT
// The ledger contract (ledger_conformance.hpp): claims, leases, fencing, release, invalidation,
// completion and supersession.
#include "ledger_conformance.hpp"

namespace idem::ledger_test {
namespace {

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
      // Until the statement waits for the table's lock: on its way there it can wait briefly
      // for one of the server's own locks (an LWLock), more often on a loaded machine.
      for (int i = 0; i < 1000 && waiting != "Lock"; ++i) {
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

}  // namespace

IDEM_LEDGER_CONFORMANCE_BACKENDS();

}  // namespace idem::ledger_test
