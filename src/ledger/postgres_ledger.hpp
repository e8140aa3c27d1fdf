// SPDX-License-Identifier: MIT
// The PostgreSQL ledger backend: many hosts, one database; claims as one INSERT ... ON CONFLICT
// statement; completion fenced on the claim token. Internal to src/ledger: the rest of the tree
// opens it through Ledger::open. Its definitions are split by concern:
//
//   postgres_ledger.cpp      what workers call: claim, confirm, heartbeat, complete, release,
//                            lookup, the digest cache, the completion in a caller's transaction
//   postgres_operations.cpp  what operators call: rows, counts, history, forget, retention
//   postgres_session.cpp     the connection: connecting, answers read ahead (pipelining)
//   postgres_protocol.cpp    statements sent prepared or not, overlapped, answers, errors
//   postgres_schema.cpp      the schema: reading its state, migrations, the claim statements
//                            that follow its shape
//   postgres_statements.hpp  the SQL text and the helpers that bind and read it
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/error.hpp"
#include "ledger/ledger.hpp"
#include "ledger/ledger_internal.hpp"
#include "ledger/postgres_statements.hpp"

namespace idem::ledger_detail {

class PostgresLedger;

class PostgresDigestCache : public DigestCache {
 public:
  explicit PostgresDigestCache(PostgresLedger& ledger) : m_ledger(ledger) {}
  std::optional<std::string> get(const std::string& path, const FileIdentity& identity) override;
  void put(const std::string& path, const FileIdentity& identity,
           const std::string& digest) override;
  std::map<std::string, std::string> get_many(const std::vector<Entry>& entries) override;
  void read_ahead(const std::vector<std::string>& paths) override;

 private:
  PostgresLedger& m_ledger;
};

class PostgresLedger : public Ledger, public CallerTransactionCompletion {
 public:
  // `read_only`: the schema is read, never migrated (Ledger::open_read_only).
  explicit PostgresLedger(const std::string& dsn, bool read_only = false);

  // Start connecting, and asking the schema query once connected, without waiting for the server
  // (postgres_preopen.cpp); the constructor takes the connection and the answer.
  static void preopen(const std::string& dsn);

  std::string backend_name() const override { return "postgresql"; }
  bool has_footprints() override;

  // WorkerLedger (postgres_ledger.cpp).
  ClaimResult claim(const ClaimRequest& request) override;
  ClaimResult claim_unless_completed(const ClaimRequest& request) override;
  ClaimResult claim_unless_completed(const ClaimRequest& request,
                                     const std::function<void()>& meanwhile) override;
  bool confirm_claim(const std::string& work_key, const std::string& claim_token) override;
  bool heartbeat(const std::string& work_key, const std::string& claim_token,
                 std::chrono::seconds lease) override;
  bool complete(const std::string& work_key, const std::string& claim_token,
                const OutputFingerprint& fingerprint,
                std::optional<int64_t> feature_count) override;
  bool release(const std::string& work_key, const std::string& claim_token) override;
  LedgerRow lookup(const std::string& work_key) override;
  bool invalidate(const std::string& work_key, const std::string& observed_token) override;
  bool replace_etag(const std::string& work_key, const std::string& observed_token,
                    const std::string& predicted, const std::string& store_etag) override;
  DigestCache& digest_cache() override { return m_digest_cache; }
  std::optional<std::string> database_identity() override;
  LedgerStats stats() const override;
  bool complete_in_transaction(PGconn* connection, const std::string& work_key,
                               const std::string& claim_token, const OutputFingerprint& fingerprint,
                               std::optional<int64_t> feature_count) override;

  // OperatorLedger (postgres_operations.cpp; migrate and schema_version in postgres_schema.cpp).
  MigrationReport migrate() override;
  int schema_version() override;
  std::vector<LedgerRow> rows(const RowFilter& filter) override;
  LedgerCounts counts(const RowFilter& filter) override;
  std::vector<LedgerRow> history(const RowFilter& filter) override;
  std::vector<LedgerRow> forget_rows(const RowFilter& filter) override;
  int64_t forget_key(const std::string& work_key) override;
  bool forget_completed(const std::string& work_key, const std::string& observed_token) override;
  int64_t archive(const ArchiveRequest& request) override;
  int64_t drop_history(std::chrono::seconds older_than,
                       const std::optional<std::string>& namespace_name) override;
  double now() override;

  // PostgresDigestCache's calls (postgres_ledger.cpp).
  std::optional<std::string> digest_get(const std::string& path, const FileIdentity& identity);
  std::map<std::string, std::string> digest_get_many(
      const std::vector<DigestCache::Entry>& entries);
  void digest_read_ahead(const std::vector<std::string>& paths);
  void digest_put(const std::string& path, const FileIdentity& identity, const std::string& digest);

 private:
  // BEGIN ... COMMIT on this connection; rolls back unless committed.
  class Transaction {
   public:
    Transaction(PostgresLedger& ledger, const char* what) : m_ledger(ledger), m_what(what) {
      m_ledger.exec_params("BEGIN", {}, m_what);
    }
    ~Transaction() {
      if (!m_committed && m_ledger.m_connection &&
          PQstatus(m_ledger.m_connection.get()) == CONNECTION_OK) {
        PgResult ignored(PQexec(m_ledger.m_connection.get(), "ROLLBACK"));
      }
    }
    Transaction(const Transaction&) = delete;
    Transaction& operator=(const Transaction&) = delete;
    void commit() {
      m_ledger.exec_params("COMMIT", {}, m_what);
      m_committed = true;
    }

   private:
    PostgresLedger& m_ledger;
    const char* m_what;
    bool m_committed = false;
  };

  // complete()'s statement, as IDEM_DURABLE_COMPLETION chooses it.
  struct CompletionStatement {
    const char* base_name;
    const char* sql;
  };

  // The worker's side (postgres_ledger.cpp).
  static bool claims_may_wait_for_confirmation();
  ClaimResult claim_locked(const ClaimRequest& request, bool unless_completed,
                           std::function<void()>* meanwhile = nullptr);
  std::optional<LedgerRow> lookup_locked(const std::string& work_key);
  static CompletionStatement completion_statement();
  void finish_read_ahead();

  // The operator's side (postgres_operations.cpp).
  int64_t archive_locked(const ArchiveRequest& request);
  static std::string filter_conditions(const RowFilter& filter, Params& params);

  // The session (postgres_session.cpp).
  std::string scrub(const std::string& message) const;
  void connect();
  void ensure_connected();
  void start_postgis_load();
  void finish_postgis_load();
  void prepare_ahead(const std::string& confirm_token);
  void finish_prepare_ahead();

  // The protocol (postgres_protocol.cpp).
  PgResult take_answer();
  [[noreturn]] void fail(const PGresult* result, const std::string& what);
  static std::vector<const char*> raw_params(const Params& params);
  void begin_read_only_transaction();
  void restore_read_only_transaction();
  PgResult checked(PGresult* raw, const std::string& what);
  PgResult exec_prepared(const char* name, const Params& params, const std::string& what);
  PgResult exec_params(const std::string& sql, const Params& params, const std::string& what);
  static int64_t affected(const PgResult& result);
  PgResult exec_overlapped(const char* name, const std::string& sql, const Params& params,
                           const std::string& what, std::function<void()>& meanwhile);
  static std::string statement_name(const char* base_name, const std::string& sql);
  PgResult exec_statement(const char* base_name, const std::string& sql, const Params& params,
                          const std::string& what, std::function<void()>* meanwhile = nullptr);

  // The schema (postgres_schema.cpp).
  static std::string schema_state_sql(bool initialised);
  static const std::string& required_extensions();
  SchemaState read_schema_state(bool in_transaction);
  void forget_lost_footprint(SchemaState& state);
  void check_trust(const SchemaState& state) const;
  void refuse_unreadable_schema(const PgResult& owner) const;
  static std::vector<Migration> applicable_migrations(const SchemaState& state,
                                                      MigrationReport* report);
  MigrationReport migrate_locked();
  bool footprint_column_lost();
  void open_schema();
  void use_schema(const SchemaState& state);
  const char* claim_unless_completed_name(bool deferred) const;
  const std::string& claim_unless_completed_sql(bool deferred) const;
  void forget_prepared_if_changed(const char* base_name, std::string& current,
                                  const std::string& sql);

  // Runs `work`, a statement that writes or copies footprints when m_has_footprint, and once
  // more without them if it failed because the footprint column is gone.
  template <class Work>
  auto with_footprint_fallback(Work work) -> decltype(work()) {
    try {
      return work();
    } catch (const Error&) {
      if (!m_has_footprint || !footprint_column_lost()) {
        throw;
      }
      return work();
    }
  }

  bool m_read_only = false;  // never migrates (Ledger::open_read_only)
  std::string m_dsn;
  std::string m_redacted;
  std::vector<std::string> m_secrets;
  std::mutex m_mutex;
  PgConnection m_connection;
  PgResult m_first_schema_answer;  // from the connection opened ahead, until read
  // Statement name -> uses on this connection (1: sent unprepared once, 2: prepared).
  std::unordered_map<std::string, int> m_statement_uses;
  std::string m_claim_sql;
  std::string m_claim_unless_completed_sql;
  // The same, committed without waiting for the flush (claims that their caller confirms).
  std::string m_claim_unless_completed_deferred_sql;
  bool m_has_footprint = false;
  bool m_owned_by_this_role = false;  // this connection's role owns schema idem
  enum class PostgisLoad { k_not_started, k_pending, k_done };
  PostgisLoad m_postgis_load = PostgisLoad::k_not_started;  // on this connection
  // digest_read_ahead's query: sent (pending), then its answer, kept for digest_get_many.
  struct ReadAhead {
    std::set<std::string> paths;
    bool pending = false;
    PgResult answer;
  };
  ReadAhead m_read_ahead;
  // The server session had statements of the ledger prepared when this connection began: its
  // pooler keeps them between clients, so preparing one serves the clients after this one.
  bool m_session_keeps_statements = false;
  // prepare_ahead's PREPAREs, sent in one query while the work runs (pending: their answers not
  // read yet), in the order of `names`.
  struct PrepareAhead {
    std::vector<std::string> names;
    std::string confirm_token;  // the claim it confirms first (k_confirm_ahead_sql), if any
    bool pending = false;
  };
  PrepareAhead m_prepare_ahead;
  // Claims made without waiting for their flush, by token, until confirm_claim, complete or
  // release: k_pending while prepare_ahead's confirmation is unread, k_unknown when it is
  // missing (not sent, failed, or lost with its connection).
  enum class Confirmation { k_pending, k_confirmed, k_unknown };
  std::unordered_map<std::string, Confirmation> m_confirmations;
  PostgresDigestCache m_digest_cache;
  std::atomic<int64_t> m_connections{0};
  std::atomic<int64_t> m_connections_opened_ahead{0};
  std::atomic<int64_t> m_claims_confirmed_by_rewrite{0};
  std::atomic<int64_t> m_statements_found_prepared{0};
  std::atomic<int64_t> m_digest_lookups_answered_ahead{0};
};

}  // namespace idem::ledger_detail
