// SPDX-License-Identifier: MIT
// A small RAII layer over the SQLite C API for the SQLite ledger: one connection with its cache of
// prepared statements, one use of a statement, one write transaction. Errors throw
// idem::Error(k_ledger) naming the database.
#pragma once

#include <sqlite3.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

namespace idem::sqlite {

// One connection: WAL, a busy handler that waits up to `busy_timeout` instead of failing with
// SQLITE_BUSY, and the statements it prepared, kept for its life.
class Database {
 public:
  // How a connection opens its file.
  enum class Access {
    k_read_write,  // the file and its directories created when missing
    k_read_only,   // SQLITE_OPEN_READONLY: nothing created but a WAL database's -wal and -shm
    // SQLite's immutable=1: nothing created at all, no lock taken; for a look at a file that
    // may not be a ledger, while no writer has it open (its -wal is not there)
    k_look_only,
  };
  // Opens `path` (never as a URI: IDEM's paths are file names); `context` names it in every
  // message. The directory holding it is opened as DirectoryHandle::open does: a link another
  // user could have made on the way is refused (UnsafePath), never followed.
  Database(const std::string& path, std::string context, std::chrono::milliseconds busy_timeout,
           Access access = Access::k_read_write);
  // The -wal file stays when the last connection closes (SQLITE_FCNTL_PERSIST_WAL): SQLite would
  // otherwise remove it by its name, which a directory swapped for a link meanwhile could
  // redirect. Asked once the file is known to be a ledger, so that a file refused stays as it
  // was.
  void keep_wal_on_close();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  // Runs one or more statements without results; `what` names them in an error (default: the
  // SQL itself).
  void exec(const std::string& sql, const std::string& what = "");
  // exec(), tried again while SQLite answers SQLITE_BUSY without calling the busy handler (a read
  // lock upgraded to the write lock while another connection does the same, as the first
  // `PRAGMA journal_mode = WAL` on a new file does), up to the busy timeout.
  void exec_waiting(const std::string& sql);
  // The prepared statement for `sql`, prepared on first use.
  sqlite3_stmt* statement(const std::string& sql);
  // Rows changed by the last statement.
  int64_t changes() const;
  const std::string& context() const { return m_context; }
  sqlite3* handle() const { return m_db.get(); }

 private:
  struct Closer {
    void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
  };
  struct Finalizer {
    void operator()(sqlite3_stmt* statement) const { sqlite3_finalize(statement); }
  };

  static int on_busy(void* self, int count);
  // sqlite3_exec of `sql`: its result code, and its message in `error` when not SQLITE_OK.
  int run(const std::string& sql, std::string& error);
  // The wait before try number `count` (0 first, which sets `since`); false once the busy timeout
  // has passed since then.
  bool wait_for_lock(int count, std::chrono::steady_clock::time_point& since) const;

  std::string m_context;
  std::chrono::milliseconds m_busy_timeout;
  std::unique_ptr<sqlite3, Closer> m_db;
  std::unordered_map<std::string, std::unique_ptr<sqlite3_stmt, Finalizer>> m_statements;
  std::chrono::steady_clock::time_point m_busy_since;
};

// One use of a cached prepared statement: binds, steps, reads; resets and clears on scope exit.
class Query {
 public:
  Query(Database& db, const std::string& sql);
  ~Query();
  Query(const Query&) = delete;
  Query& operator=(const Query&) = delete;

  Query& bind(int index, const std::string& value);
  Query& bind(int index, int64_t value);
  Query& bind(int index, double value);
  template <class T>
  Query& bind(int index, const std::optional<T>& value) {
    return value ? bind(index, *value) : bind_null(index);
  }
  Query& bind_null(int index);

  // True while there is a row.
  bool step();
  // Steps to the end.
  void run();

  bool is_null(int i) const;
  std::string text(int i) const;
  int64_t integer(int i) const;
  double real(int i) const;

 private:
  Query& check(int rc);

  Database& m_db;
  sqlite3_stmt* m_statement;
};

// BEGIN IMMEDIATE takes the write lock up front (waiting on the busy handler), so a transaction
// never fails half way on a lock upgrade. Rolls back unless committed.
class Transaction {
 public:
  explicit Transaction(Database& db);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  void commit();

 private:
  Database& m_db;
  bool m_committed = false;
};

}  // namespace idem::sqlite
