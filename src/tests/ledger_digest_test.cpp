// SPDX-License-Identifier: MIT
// The ledger contract (ledger_conformance.hpp): the digest cache (hits, batches, read-ahead) and
// its PostGIS load.
#include "ledger_conformance.hpp"

namespace idem::ledger_test {
namespace {

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

}  // namespace

IDEM_LEDGER_CONFORMANCE_BACKENDS();

}  // namespace idem::ledger_test
