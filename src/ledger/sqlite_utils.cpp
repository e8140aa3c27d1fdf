// SPDX-License-Identifier: MIT
// The SQLite RAII layer (sqlite_utils.hpp).
#include "ledger/sqlite_utils.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "base/directory_handle.hpp"
#include "base/error.hpp"
#include "base/paths.hpp"

namespace idem::sqlite {

namespace {

void make_directories(const std::string& path) {
  for (size_t slash = path.find('/', 1); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    const std::string directory = path.substr(0, slash);
    if (mkdir(directory.c_str(), 0700) != 0 && errno != EEXIST) {
      throw Error(ErrorKind::k_ledger, "cannot create directory " + directory + " for the " +
                                           "SQLite ledger: " + std::strerror(errno));
    }
  }
}

// "file:<path>?immutable=1", the path percent-encoded where a URI would read it otherwise.
std::string immutable_uri(const std::string& path) {
  std::string uri = "file:";
  for (const unsigned char c : path) {
    if (c == '%' || c == '?' || c == '#' || c < 0x20 || c >= 0x7f) {
      char escaped[4];
      std::snprintf(escaped, sizeof(escaped), "%%%02X", c);
      uri += escaped;
    } else {
      uri += static_cast<char>(c);
    }
  }
  return uri + "?immutable=1";
}

}  // namespace

Database::Database(const std::string& path, std::string context,
                   std::chrono::milliseconds busy_timeout, Access access)
    : m_context(std::move(context)), m_busy_timeout(busy_timeout) {
  const bool in_memory = path == ":memory:";
  std::string name = path;
  if (!in_memory) {
    name = absolute_path(path);  // never read as a URI (a relative "file:..." would be)
    if (access == Access::k_read_write) {
      make_directories(name);
    }
    try {
      DirectoryHandle::open(dirname_of(name));  // refuses a link another user could have made
    } catch (const UnsafePath& unsafe) {
      throw UnsafePath("the " + m_context + " cannot be opened: " + unsafe.what());
    }
  }
  int flags = access == Access::k_read_write ? SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
                                             : SQLITE_OPEN_READONLY;
  if (access == Access::k_look_only) {
    name = immutable_uri(name);
    flags |= SQLITE_OPEN_URI;
  }
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(name.c_str(), &raw, flags | SQLITE_OPEN_NOMUTEX, nullptr);
  m_db.reset(raw);
  if (rc != SQLITE_OK) {
    throw Error(ErrorKind::k_ledger,
                "cannot open the " + m_context + ": " +
                    (raw != nullptr ? sqlite3_errmsg(raw) : sqlite3_errstr(rc)));
  }
  sqlite3_extended_result_codes(m_db.get(), 1);
  sqlite3_busy_handler(m_db.get(), &Database::on_busy, this);
}

void Database::keep_wal_on_close() {
  int persist = 1;
  sqlite3_file_control(m_db.get(), "main", SQLITE_FCNTL_PERSIST_WAL, &persist);
}

// A finer backoff than sqlite3_busy_timeout's (whose first sleeps are whole milliseconds, longer
// than most ledger transactions hold the lock): 20 us doubling to 1 ms, up to the busy timeout.
int Database::on_busy(void* self, int count) {
  auto& db = *static_cast<Database*>(self);
  return db.wait_for_lock(count, db.m_busy_since) ? 1 : 0;
}

bool Database::wait_for_lock(int count, std::chrono::steady_clock::time_point& since) const {
  const auto now = std::chrono::steady_clock::now();
  if (count == 0) {
    since = now;
  } else if (now - since > m_busy_timeout) {
    return false;
  }
  std::this_thread::sleep_for(std::chrono::microseconds(20 << std::min(count, 6)));
  return true;
}

int Database::run(const std::string& sql, std::string& error) {
  char* message = nullptr;
  const int rc = sqlite3_exec(m_db.get(), sql.c_str(), nullptr, nullptr, &message);
  if (rc != SQLITE_OK) {
    error = message != nullptr ? message : sqlite3_errmsg(m_db.get());
  }
  sqlite3_free(message);
  return rc;
}

void Database::exec(const std::string& sql, const std::string& what) {
  std::string error;
  if (run(sql, error) != SQLITE_OK) {
    throw Error(ErrorKind::k_ledger, m_context + ": " + (what.empty() ? sql : what) + ": " + error);
  }
}

void Database::exec_waiting(const std::string& sql) {
  std::chrono::steady_clock::time_point since;
  std::string error;
  for (int count = 0;; ++count) {
    const int rc = run(sql, error);
    if (rc == SQLITE_OK) {
      return;
    }
    if ((rc & 0xff) != SQLITE_BUSY || !wait_for_lock(count, since)) {
      throw Error(ErrorKind::k_ledger, m_context + ": " + sql + ": " + error);
    }
  }
}

sqlite3_stmt* Database::statement(const std::string& sql) {
  auto found = m_statements.find(sql);
  if (found != m_statements.end()) {
    return found->second.get();
  }
  sqlite3_stmt* raw = nullptr;
  if (sqlite3_prepare_v3(m_db.get(), sql.c_str(), static_cast<int>(sql.size()),
                         SQLITE_PREPARE_PERSISTENT, &raw, nullptr) != SQLITE_OK) {
    throw Error(ErrorKind::k_ledger,
                m_context + ": cannot prepare a statement: " + sqlite3_errmsg(m_db.get()));
  }
  m_statements.emplace(sql, std::unique_ptr<sqlite3_stmt, Finalizer>(raw));
  return raw;
}

int64_t Database::changes() const {
  return sqlite3_changes(m_db.get());
}

Query::Query(Database& db, const std::string& sql) : m_db(db), m_statement(db.statement(sql)) {}

Query::~Query() {
  sqlite3_reset(m_statement);
  sqlite3_clear_bindings(m_statement);
}

Query& Query::bind(int index, const std::string& value) {
  return check(sqlite3_bind_text(m_statement, index, value.data(), static_cast<int>(value.size()),
                                 SQLITE_TRANSIENT));
}

Query& Query::bind(int index, int64_t value) {
  return check(sqlite3_bind_int64(m_statement, index, value));
}

Query& Query::bind(int index, double value) {
  return check(sqlite3_bind_double(m_statement, index, value));
}

Query& Query::bind_null(int index) {
  return check(sqlite3_bind_null(m_statement, index));
}

bool Query::step() {
  const int rc = sqlite3_step(m_statement);
  if (rc == SQLITE_ROW) {
    return true;
  }
  if (rc == SQLITE_DONE) {
    return false;
  }
  throw Error(ErrorKind::k_ledger, m_db.context() + ": " + sqlite3_errmsg(m_db.handle()));
}

void Query::run() {
  while (step()) {
  }
}

bool Query::is_null(int i) const {
  return sqlite3_column_type(m_statement, i) == SQLITE_NULL;
}

std::string Query::text(int i) const {
  const auto* data = sqlite3_column_text(m_statement, i);
  return data == nullptr ? std::string()
                         : std::string(reinterpret_cast<const char*>(data),
                                       static_cast<size_t>(sqlite3_column_bytes(m_statement, i)));
}

int64_t Query::integer(int i) const {
  return sqlite3_column_int64(m_statement, i);
}

double Query::real(int i) const {
  return sqlite3_column_double(m_statement, i);
}

Query& Query::check(int rc) {
  if (rc != SQLITE_OK) {
    throw Error(ErrorKind::k_ledger, m_db.context() + ": " + sqlite3_errmsg(m_db.handle()));
  }
  return *this;
}

Transaction::Transaction(Database& db) : m_db(db) {
  m_db.exec("BEGIN IMMEDIATE");
}

Transaction::~Transaction() {
  if (!m_committed) {
    sqlite3_exec(m_db.handle(), "ROLLBACK", nullptr, nullptr, nullptr);
  }
}

void Transaction::commit() {
  m_db.exec("COMMIT");
  m_committed = true;
}

}  // namespace idem::sqlite
