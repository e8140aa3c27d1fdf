// SPDX-License-Identifier: MIT
// Feature loads: claim, stage, swap in one transaction with the (fenced) completion, release on
// failure. The staging copy runs GDALVectorTranslate, ogr2ogr's own library call, into the
// target database; every statement of the swap is parameterised or quotes identifiers with
// PQescapeIdentifier.
#include "work/feature_load.hpp"

#include <libpq-fe.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "base/error.hpp"
#include "base/progress.hpp"
#include "cpl_conv.h"
#include "cpl_error.h"
#include "cpl_string.h"
#include "gdal_priv.h"
#include "gdal_utils.h"
#include "key/command_line.hpp"
#include "ledger/caller_transaction.hpp"
#include "ledger/ledger.hpp"
#include "pg/pg_handles.hpp"
#include "work/claim_loop.hpp"
#include "work/lease.hpp"
#include "work/target_session.hpp"

namespace idem {

namespace {

constexpr const char* k_source_column = "idem_source";
constexpr const char* k_key_column = "idem_work_key";
constexpr size_t k_max_identifier = 63;  // PostgreSQL's NAMEDATALEN - 1

// ---------------------------------------------------------------------------------------------

struct DatasetClose {
  void operator()(GDALDatasetH dataset) const {
    if (dataset != nullptr) {
      GDALClose(dataset);
    }
  }
};
using DatasetHandle = std::unique_ptr<void, DatasetClose>;

std::vector<std::string> values_of(const std::vector<std::string>& options, const char* option) {
  return option_values(GdalProgram::k_ogr2ogr, options, option);
}

bool has_layer_schema_option(const std::vector<std::string>& options) {
  for (const auto& value : values_of(options, "-lco")) {
    if (EQUALN(value.c_str(), "SCHEMA=", 7)) {
      return true;
    }
  }
  return false;
}

class LoadAttempt {
 public:
  LoadAttempt(const FeatureLoadRequest& request, const FeatureWork& work, WorkerLedger& ledger,
              const ClaimResult& claim)
      : m_request(request),
        m_work(work),
        m_ledger(ledger),
        m_token(claim.claim_token),
        m_session(work.target) {}

  FeatureLoadResult run() {
    FeatureLoadResult result;
    result.work = m_work;
    try {
      prepare();
      stage();
      result.feature_count = publish_in_one_transaction();
      result.completed_with_swap = m_same_database;
      if (!m_same_database) {
        test_pause("before_complete");
        OutputFingerprint fingerprint;
        fingerprint.size = result.feature_count;
        if (!complete_through_reconnects(m_ledger, m_work.key, m_token, fingerprint,
                                         m_request.lease, result.feature_count)) {
          throw Error(ErrorKind::k_ledger,
                      "the load was committed but the claim had been taken over by another "
                      "worker, so this attempt's completion was refused; that worker records "
                      "the load");
        }
      }
    } catch (...) {
      clean_up_after_failure();
      throw;
    }
    test_pause("after_complete");
    return result;
  }

 private:
  std::string qualified(const std::string& table) {
    return m_session.ident(m_schema) + "." + m_session.ident(table);
  }

  void prepare() {
    m_schema = m_work.target.schema.value_or("");  // named, or the server's (the key's)
    m_staging = staging_table_prefix(m_work.key) + m_token.substr(0, 8);
    m_target_sql = qualified(m_work.target.table);
    m_staging_sql = qualified(m_staging);
    const std::optional<std::string> ledger_identity = m_ledger.database_identity();
    m_same_database = ledger_identity && *ledger_identity == database_identity_of(m_session.get());
    CPLDebug("IDEM", "load %s: staging %s.%s, ledger %s the target database", m_work.key.c_str(),
             m_schema.c_str(), m_staging.c_str(), m_same_database ? "in" : "outside");
    // Staging tables of earlier attempts of this key (killed workers): we hold the claim now.
    pg::Result orphans = m_session.exec(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND starts_with(c.relname, $2)",
        {m_schema, staging_table_prefix(m_work.key)}, "looking for orphaned staging tables");
    for (int i = 0; i < PQntuples(orphans.get()); ++i) {
      const std::string orphan = PQgetvalue(orphans.get(), i, 0);
      CPLDebug("IDEM", "dropping orphaned staging table %s", orphan.c_str());
      m_session.exec("DROP TABLE IF EXISTS " + qualified(orphan), {},
                     "dropping an orphaned staging table");
    }
  }

  void stage() {
    const Ogr2ogrCommand& command = m_request.command;
    // The PG driver puts a schema-qualified layer name in that schema; with -lco SCHEMA the
    // option decides and the name stays plain.
    const std::string staging_layer =
        has_layer_schema_option(command.options) ? m_staging : m_schema + "." + m_staging;
    CPLStringList translate_options;
    for (const auto& option : staging_translate_options(command, staging_layer)) {
      translate_options.AddString(option.c_str());
    }
    CPLStringList open_options;
    for (const auto& option : values_of(command.options, "-oo")) {
      open_options.AddString(option.c_str());
    }
    CPLStringList target_open_options;
    for (const auto& option : values_of(command.options, "-doo")) {
      target_open_options.AddString(option.c_str());
    }
    const char* const pg_only[] = {"PostgreSQL", nullptr};

    LeaseKeeper keeper(m_ledger, m_work.key, m_token, m_request.lease, std::nullopt);
    CPLErrorReset();
    DatasetHandle source(GDALOpenEx(command.source.c_str(),
                                    GDAL_OF_VECTOR | GDAL_OF_READONLY | GDAL_OF_VERBOSE_ERROR,
                                    nullptr, open_options.List(), nullptr));
    if (!source) {
      throw Error(ErrorKind::k_source,
                  "cannot open the bundle '" + command.source + "': " + CPLGetLastErrorMsg());
    }
    DatasetHandle target(GDALOpenEx(command.destination.c_str(),
                                    GDAL_OF_VECTOR | GDAL_OF_UPDATE | GDAL_OF_VERBOSE_ERROR,
                                    pg_only, target_open_options.List(), nullptr));
    if (!target) {
      throw Error(ErrorKind::k_io,
                  m_session.scrub("cannot open the target " + m_work.target.display +
                                  " for writing: " + CPLGetLastErrorMsg()));
    }
    GDALVectorTranslateOptions* options =
        GDALVectorTranslateOptionsNew(translate_options.List(), nullptr);
    if (options == nullptr) {
      throw Error(ErrorKind::k_usage,
                  std::string("the ogr2ogr options are invalid: ") + CPLGetLastErrorMsg());
    }
    ProgressRelay relay(m_request.show_progress ? GDALTermProgress : GDALDummyProgress, nullptr,
                        keeper.progress_check("during_load",
                                              "IDEM: the claim on this load was lost (lease "
                                              "expired and another worker took it over); "
                                              "aborting"));
    GDALVectorTranslateOptionsSetProgress(options, relay.function(), relay.data());
    GDALDatasetH source_handle = source.get();
    int usage_error = FALSE;
    CPLErrorReset();
    GDALDatasetH written =
        GDALVectorTranslate(nullptr, target.get(), 1, &source_handle, options, &usage_error);
    GDALVectorTranslateOptionsFree(options);
    std::string message = CPLGetLastErrorMsg();
    // Closing the target ends the COPY and commits what the driver wrote.
    CPLErrorReset();
    target.reset();
    if (message.empty() && CPLGetLastErrorType() == CE_Failure) {
      message = CPLGetLastErrorMsg();
    }
    if (written == nullptr || CPLGetLastErrorType() == CE_Failure) {
      if (keeper.lost()) {
        throw Error(ErrorKind::k_ledger, "the claim on this load was lost while loading");
      }
      throw Error(usage_error ? ErrorKind::k_usage : ErrorKind::k_source,
                  m_session.scrub("ogr2ogr's load of '" + command.source + "' failed" +
                                  (message.empty() ? std::string() : ": " + message)));
    }
    if (m_session.value("SELECT to_regclass($1) IS NOT NULL", {m_staging_sql},
                        "checking the staging table") != "t") {
      throw Error(ErrorKind::k_source,
                  "ogr2ogr wrote no table from '" + command.source + "' (no layer selected?)");
    }
    test_pause("before_swap");
    if (!keeper.renew_now()) {
      throw Error(ErrorKind::k_ledger,
                  "the claim on this load was lost before the swap (lease "
                  "expired and another worker took it over)");
    }
    keeper.stop();  // the swap's completion locks the ledger row: no heartbeat may wait on it
  }

  // Provenance columns of append mode: constant defaults are catalogue-only in PostgreSQL 11+
  // (no table rewrite); DDL takes no parameters, so the values are quoted literals.
  void add_provenance_columns() {
    const std::string bundle = literal(m_work.bundle);
    const std::string key = literal(m_work.key);
    m_session.exec("ALTER TABLE " + m_staging_sql + " ADD COLUMN " +
                       m_session.ident(k_source_column) + " text NOT NULL DEFAULT " + bundle +
                       ", ADD COLUMN " + m_session.ident(k_key_column) + " text DEFAULT " + key,
                   {}, "adding the provenance columns");
    m_session.exec("ALTER TABLE " + m_staging_sql + " ALTER COLUMN " +
                       m_session.ident(k_source_column) + " DROP DEFAULT, ALTER COLUMN " +
                       m_session.ident(k_key_column) + " DROP DEFAULT, ALTER COLUMN " +
                       m_session.ident(k_source_column) + " DROP NOT NULL",
                   {}, "adding the provenance columns");
  }

  std::string literal(const std::string& text) {
    std::unique_ptr<char, decltype(&PQfreemem)> quoted(
        PQescapeLiteral(m_session.get(), text.c_str(), text.size()), &PQfreemem);
    if (!quoted) {
      throw Error(ErrorKind::k_usage, "cannot quote '" + text + "' as an SQL literal");
    }
    return quoted.get();
  }

  // Give the staging table's indexes and owned sequences the target's names (the PG driver
  // named them after the staging table): "<staging>_pkey" -> "<target>_pkey".
  void rename_dependents() {
    pg::Result dependents = m_session.exec(
        "SELECT c.relname, c.relkind FROM pg_class c WHERE c.oid IN ("
        " SELECT indexrelid FROM pg_index WHERE indrelid = $1::regclass"
        " UNION SELECT d.objid FROM pg_depend d JOIN pg_class s ON s.oid = d.objid"
        " WHERE d.refobjid = $1::regclass AND d.classid = 'pg_class'::regclass"
        " AND s.relkind = 'S')",
        {m_target_sql}, "listing the staging table's indexes and sequences");
    for (int i = 0; i < PQntuples(dependents.get()); ++i) {
      const std::string name = PQgetvalue(dependents.get(), i, 0);
      const std::string kind = PQgetvalue(dependents.get(), i, 1);
      if (name.rfind(m_staging, 0) != 0) {
        continue;
      }
      const std::string renamed = m_work.target.table + name.substr(m_staging.size());
      if (renamed.size() > k_max_identifier ||
          m_session.value("SELECT to_regclass($1) IS NULL", {qualified(renamed)},
                          "renaming the staging table's dependents") != "t") {
        continue;  // keep the staging name rather than collide or be truncated
      }
      m_session.exec(std::string("ALTER ") + (kind == "S" ? "SEQUENCE " : "INDEX ") +
                         qualified(name) + " RENAME TO " + m_session.ident(renamed),
                     {}, "renaming the staging table's dependents");
    }
  }

  // The staging table's columns that carry data (not serial/identity keys the target numbers
  // itself), quoted, comma-separated; each must exist in the target.
  std::string data_columns() {
    pg::Result columns = m_session.exec(
        "SELECT a.attname, EXISTS (SELECT 1 FROM pg_attribute t WHERE t.attrelid = "
        "$2::regclass AND t.attname = a.attname AND t.attnum > 0 AND NOT t.attisdropped) "
        "FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = "
        "a.attnum WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped "
        "AND a.attidentity = '' AND (d.adbin IS NULL OR pg_get_expr(d.adbin, d.adrelid) NOT "
        "LIKE 'nextval(%') ORDER BY a.attnum",
        {m_staging_sql, m_target_sql}, "reading the staged columns");
    std::string list;
    for (int i = 0; i < PQntuples(columns.get()); ++i) {
      const std::string name = PQgetvalue(columns.get(), i, 0);
      if (std::string(PQgetvalue(columns.get(), i, 1)) != "t") {
        throw Error(ErrorKind::k_usage, "the target " + m_work.target.display +
                                            " has no column \"" + name +
                                            "\" that this bundle loads: its fields differ from "
                                            "the table's (load with the same options)");
      }
      list += (list.empty() ? "" : ", ") + m_session.ident(name);
    }
    return list;
  }

  // The one transaction: swap (replace) or delete+insert (append), drop the staging table and,
  // with the ledger in this database, the fenced completion. Returns the feature count.
  int64_t publish_in_one_transaction() {
    const bool append = m_work.mode == LoadMode::k_append;
    if (append) {
      add_provenance_columns();
    }
    int64_t count = 0;
    m_session.exec("BEGIN", {}, "starting the swap");
    m_in_transaction = true;
    // Loads into one table take turns (append mode's first load creates the table).
    m_session.exec("SELECT pg_advisory_xact_lock(hashtextextended($1, 7306435217950412))",
                   {m_target_sql}, "locking the target");
    const bool exists = m_session.value("SELECT to_regclass($1) IS NOT NULL", {m_target_sql},
                                        "checking the target") == "t";
    if (!append || !exists) {
      count = std::stoll(m_session.value("SELECT count(*) FROM " + m_staging_sql, {},
                                         "counting the staged features"));
    }
    test_pause("swap_begun");
    if (!append || !exists) {
      if (exists) {
        m_session.exec("DROP TABLE " + m_target_sql, {}, "dropping the replaced target table");
        test_pause("swap_dropped");
      }
      m_session.exec(
          "ALTER TABLE " + m_staging_sql + " RENAME TO " + m_session.ident(m_work.target.table), {},
          "renaming the staging table to the target");
      rename_dependents();
      if (append) {
        create_source_index();
      }
      test_pause("swap_renamed");
    } else {
      m_session.exec("ALTER TABLE " + m_target_sql + " ADD COLUMN IF NOT EXISTS " +
                         m_session.ident(k_source_column) + " text, ADD COLUMN IF NOT EXISTS " +
                         m_session.ident(k_key_column) + " text",
                     {}, "adding the provenance columns to the target");
      create_source_index();
      m_session.exec(
          "DELETE FROM " + m_target_sql + " WHERE " + m_session.ident(k_source_column) + " = $1",
          {m_work.bundle}, "deleting the bundle's previous rows");
      test_pause("swap_deleted");
      const std::string columns = data_columns();
      pg::Result inserted = m_session.exec("INSERT INTO " + m_target_sql + " (" + columns +
                                               ") SELECT " + columns + " FROM " + m_staging_sql,
                                           {}, "inserting the staged rows");
      count = std::stoll(PQcmdTuples(inserted.get()));
      test_pause("swap_inserted");
      m_session.exec("DROP TABLE " + m_staging_sql, {}, "dropping the staging table");
    }
    if (m_same_database) {
      // Fenced, in this transaction: the data change and the completion commit together.
      OutputFingerprint fingerprint;
      fingerprint.size = count;
      if (!complete_in_transaction(m_ledger, m_session.get(), m_work.key, m_token, fingerprint,
                                   count)) {
        throw Error(ErrorKind::k_ledger,
                    "the claim on this load was taken over by another "
                    "worker during the swap; the swap was rolled back");
      }
    }
    test_pause("before_commit");
    m_session.exec("COMMIT", {}, "committing the swap");
    m_in_transaction = false;
    return count;
  }

  void create_source_index() {
    std::string index = m_work.target.table + "_idem_source_idx";
    if (index.size() > k_max_identifier) {
      index = "idem_source_" + m_work.key.substr(0, 16) + "_idx";
    }
    m_session.exec("CREATE INDEX IF NOT EXISTS " + m_session.ident(index) + " ON " + m_target_sql +
                       " (" + m_session.ident(k_source_column) + ")",
                   {}, "indexing the provenance column");
  }

  // Roll back, drop the staging table, release the claim; never throws.
  void clean_up_after_failure() {
    try {
      if (m_session.ok() && m_in_transaction) {
        pg::Result ignored(PQexec(m_session.get(), "ROLLBACK"));
      }
      if (!m_session.ok()) {
        m_session.connect();
      }
      if (!m_staging_sql.empty()) {
        m_session.exec("DROP TABLE IF EXISTS " + m_staging_sql, {}, "dropping the staging table");
      }
    } catch (const Error& error) {
      CPLDebug("IDEM", "cleaning up the staging table failed: %s", error.what());
    }
    try {
      m_ledger.release(m_work.key, m_token);
    } catch (const Error& error) {
      CPLDebug("IDEM", "releasing the claim failed: %s", error.what());
    }
  }

  const FeatureLoadRequest& m_request;
  const FeatureWork& m_work;
  WorkerLedger& m_ledger;
  std::string m_token;
  TargetSession m_session;
  std::string m_schema;
  std::string m_staging;
  std::string m_staging_sql;
  std::string m_target_sql;
  bool m_same_database = false;
  bool m_in_transaction = false;
};

}  // namespace

std::string staging_table_prefix(const std::string& work_key) {
  return "idem_stg_" + work_key.substr(0, 16) + "_";
}

FeatureLoadResult run_feature_load(FeatureLoadRequest request) {
  std::unique_ptr<Ledger> ledger = Ledger::open(request.ledger_dsn);
  if (request.settings.digest_cache == nullptr) {
    request.settings.digest_cache = &ledger->digest_cache();
  }
  if (!request.settings.current_schema) {
    request.settings.current_schema = ask_current_schema;
  }
  const FeatureWork work = describe_feature_load(request.command, request.settings);

  ClaimRequest claim_request;
  claim_request.work_key = work.key;
  claim_request.namespace_name = work.namespace_name;
  claim_request.layer = work.target.table;
  claim_request.output_uri = work.output_uri;
  claim_request.work_json = work.canonical_json;
  claim_request.lease = request.lease;
  claim_request.worker_host = worker_host_name();
  claim_request.worker_pid = getpid();

  bool waited = false;
  return run_claim_loop(
      [&] {
        // Completed (and not superseded) work comes back as it stands, with nothing written;
        // on PostgreSQL one statement asks both questions.
        claim_request.claim_token = new_claim_token();
        return ledger->claim_unless_completed(claim_request);
      },
      [&](const ClaimResult& claim) {
        LoadAttempt attempt(request, work, *ledger, claim);
        FeatureLoadResult result = attempt.run();
        result.attempt = claim.attempt;
        result.waited = waited;
        return result;
      },
      [&](const ClaimResult& claim) -> std::optional<FeatureLoadResult> {
        FeatureLoadResult result;
        result.outcome = FeatureLoadOutcome::k_skipped;
        result.work = work;
        result.feature_count = claim.row.feature_count.value_or(0);
        result.attempt = claim.row.attempt;
        result.waited = waited;
        return result;
      },
      [&](const LedgerRow& holder) {
        if (request.fail_when_busy) {
          throw WorkBusy("the load " + work.key.substr(0, 12) + " into " + work.target.display +
                         " is being done by " + describe_holder(holder) + "; IDEM_ON_BUSY=FAIL");
        }
        if (!waited) {
          CPLError(CE_Warning, CPLE_AppDefined, "IDEM: waiting for %s, which holds this load",
                   describe_holder(holder).c_str());
          waited = true;
        }
      });
}

}  // namespace idem
