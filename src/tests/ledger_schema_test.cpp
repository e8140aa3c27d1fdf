// SPDX-License-Identifier: MIT
// The ledger contract (ledger_conformance.hpp): migrations, footprints, and completion inside a
// caller's transaction (feature loads).
#include "ledger_conformance.hpp"

namespace idem::ledger_test {
namespace {

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

}  // namespace

IDEM_LEDGER_CONFORMANCE_BACKENDS();

}  // namespace idem::ledger_test
