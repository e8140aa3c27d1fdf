// SPDX-License-Identifier: MIT
// The ledger contract's fixture: one value-parameterised suite, LedgerConformance, run against
// SQLite, PostgreSQL with PostGIS and PostgreSQL without it, by the files that test it by
// subject: ledger_conformance_test.cpp (claims, leases, fencing, completion), ledger_rows_test.cpp
// (lookups, filters, forgetting, retention, counts), ledger_digest_test.cpp (the digest cache),
// ledger_schema_test.cpp (migrations, footprints, completion in a caller's transaction).
// Backend-specific behaviour is ledger_backends_test.cpp. Real databases.
#pragma once

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

namespace idem::ledger_test {

using namespace std::chrono_literals;

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

}  // namespace idem::ledger_test

// Each file of the suite runs its tests against the three backends.
#define IDEM_LEDGER_CONFORMANCE_BACKENDS()                                                        \
  INSTANTIATE_TEST_SUITE_P(                                                                       \
      Backends, LedgerConformance, ::testing::Values("sqlite", "postgresql", "postgresql_nogis"), \
      [](const ::testing::TestParamInfo<std::string>& param_info) { return param_info.param; })
