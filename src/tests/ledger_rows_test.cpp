// SPDX-License-Identifier: MIT
// The ledger contract (ledger_conformance.hpp): lookups, filters and pages of rows, forgetting,
// retention (archive, history) and counts.
#include "ledger_conformance.hpp"

namespace idem::ledger_test {
namespace {

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

}  // namespace

IDEM_LEDGER_CONFORMANCE_BACKENDS();

}  // namespace idem::ledger_test
