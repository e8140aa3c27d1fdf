// SPDX-License-Identifier: MIT
// Backend-specific behaviour of the ledgers: DSN redaction and parsing (never a password shown),
// the SQLite file's place and creation, PostgreSQL roles, extensions and connections. Real
// databases.
#include <random>

#include "ledger_conformance.hpp"
#include "pg/dsn_secrets.hpp"
#include "pg/pg_handles.hpp"

namespace idem::ledger_test {
namespace {

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

// The one scanner of libpq keyword strings (scan_conninfo_keywords: the ledger's redaction, a
// load's PG: target) reads what libpq reads: generated strings (quoted and bare values, escaped
// quotes, backslashes and blanks, blanks around '=', and strings broken on purpose) are checked
// against libpq's own parser, and every redaction of them hides the password.
TEST(LedgerDsn, TheKeywordScannerReadsWhatLibpqReadsAndRedactionHidesEveryPassword) {
  std::mt19937 random(20261206);
  const auto pick = [&](const std::string& choices) {
    return choices[std::uniform_int_distribution<size_t>(0, choices.size() - 1)(random)];
  };
  const auto chance = [&](int percent) {
    return std::uniform_int_distribution<int>(0, 99)(random) < percent;
  };
  const std::vector<std::string> names = {"host",    "dbname",  "user", "application_name",
                                          "options", "password"};
  int parsed = 0;
  int refused = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string text;
    bool has_password = false;
    const int count = std::uniform_int_distribution<int>(1, 4)(random);
    for (int k = 0; k < count; ++k) {
      const std::string& name = names[std::uniform_int_distribution<size_t>(0, 5)(random)];
      std::string value;
      const bool secret = name == "password";
      if (secret) {
        value = "S3cr";
        has_password = true;
      }
      const int length = std::uniform_int_distribution<int>(secret ? 0 : 1, 6)(random);
      for (int c = 0; c < length; ++c) {
        value += pick("ab9=_ '\\");
      }
      std::string written;
      if (chance(50)) {
        written = "'";
        for (const char c : value) {
          written += (c == '\'' || c == '\\') ? std::string("\\") + c : std::string(1, c);
        }
        written += "'";
      } else {
        for (const char c : value) {
          written +=
              (c == ' ' || c == '\'' || c == '\\') ? std::string("\\") + c : std::string(1, c);
        }
      }
      text += (k > 0 ? std::string(chance(30) ? "  " : " ") : std::string()) + name +
              (chance(20) ? " = " : "=") + written;
    }
    if (chance(25)) {  // broken on purpose: a character dropped or added somewhere
      const size_t at = std::uniform_int_distribution<size_t>(0, text.size() - 1)(random);
      if (chance(50)) {
        text.erase(at, 1);
      } else {
        text.insert(at, 1, pick("'\\= x"));
      }
    }
    const auto scanned = scan_conninfo_keywords(text);
    const pg::ConninfoOptions libpq = pg::parse_conninfo(text);
    const PQconninfoOption* options = libpq.get();
    // libpq refuses a name it does not know, which a character added or dropped can make; the
    // scanner reads the shape only.
    bool names_known = true;
    if (scanned) {
      for (const ConninfoKeyword& keyword : *scanned) {
        names_known =
            names_known && std::find(names.begin(), names.end(), keyword.name) != names.end();
      }
    }
    if (names_known) {
      ASSERT_EQ(scanned.has_value(), options != nullptr) << text;
    }
    if (scanned && options != nullptr) {
      ++parsed;
      std::map<std::string, std::string> last;
      for (const ConninfoKeyword& keyword : *scanned) {
        last[keyword.name] = keyword.value;
        EXPECT_LE(keyword.value_begin, keyword.value_end) << text;
      }
      for (const PQconninfoOption* option = options; option->keyword != nullptr; ++option) {
        const auto found = last.find(option->keyword);
        if (found != last.end()) {
          EXPECT_EQ(found->second, option->val != nullptr ? option->val : "") << text;
        }
      }
    } else {
      ++refused;
    }
    // (A text without '=' is no DSN but an SQLite file's path, shown as it is.)
    if (has_password && Ledger::backend_of(text) == "postgresql") {
      EXPECT_EQ(Ledger::redact_dsn(text).find("S3cr"), std::string::npos) << text;
    }
  }
  EXPECT_GT(parsed, 1000);  // both kinds were generated in numbers
  EXPECT_GT(refused, 100);
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
}  // namespace idem::ledger_test
