// SPDX-License-Identifier: MIT
// The IDEM driver's ledgers (driver_ledgers.hpp).
#include "driver_ledgers.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "base/error.hpp"
#include "cpl_conv.h"
#include "cpl_string.h"
#include "cpl_vsi.h"
#include "work/output_check.hpp"

namespace idem {

namespace {

// One ledger connection per DSN per process: opening (and checking the schema) on every
// CreateCopy would dominate the cost of a skip. Ledger instances serialise their own calls. The
// k_kept_ledgers most recently used stay open; one used less recently is closed once the last call
// using it ends (a process that works into many ledgers in turn keeps a bounded number of files
// and connections open). After a fork the parent's connections are abandoned, never closed:
// closing a PostgreSQL connection from the child would end the parent's session.
constexpr size_t k_kept_ledgers = 4;

// A ledger's digest cache that records nothing in the ledger (a dry run writes nothing there,
// invariant I4): digests are looked up in the ledger, and those this process computed are kept in
// memory, so a source shared by a batch of dry runs is hashed once.
class LookupOnlyDigestCache final : public DigestCache {
 public:
  explicit LookupOnlyDigestCache(std::unique_ptr<Ledger> ledger) : m_ledger(std::move(ledger)) {}
  std::optional<std::string> get(const std::string& path, const FileIdentity& identity) override {
    if (auto computed = m_computed.get(path, identity)) {
      return computed;
    }
    return m_ledger->digest_cache().get(path, identity);
  }
  void put(const std::string& path, const FileIdentity& identity,
           const std::string& digest) override {
    m_computed.put(path, identity, digest);
  }

 private:
  std::unique_ptr<Ledger> m_ledger;
  InMemoryDigestCache m_computed;
};

// Most recently used first.
using LedgerList = std::list<std::pair<std::string, std::shared_ptr<Ledger>>>;

struct SharedLedgers {
  std::mutex mutex;
  LedgerList* ledgers = new LedgerList();
  std::map<std::string, DigestCache*>* lookups = new std::map<std::string, DigestCache*>();
  pid_t owner = getpid();
};

SharedLedgers& shared_ledgers() {
  static auto* instance = new SharedLedgers();  // leaked: ledgers live for the process
  return *instance;
}

// The first use of /vsiidem/ in a process comes before a write through it (gdalwarp looks at its
// output before it opens the sources and works out the grid): a PostgreSQL ledger named by
// IDEM_LEDGER starts connecting then, and each later use moves the connection on, so that the
// driver finds it made (Ledger::preopen). IDEM_LEDGER_PREOPEN=NO turns this off.
void start_opening_ledger_ahead() {
  const char* dsn = CPLGetConfigOption("IDEM_LEDGER", nullptr);
  if (dsn == nullptr || dsn[0] == '\0' ||
      !CPLTestBool(CPLGetConfigOption("IDEM_LEDGER_PREOPEN", "YES")) ||
      CPLTestBool(CPLGetConfigOption("IDEM_DRY_RUN", "NO"))) {
    return;  // a dry run touches no ledger
  }
  {
    SharedLedgers& shared = shared_ledgers();
    std::lock_guard<std::mutex> lock(shared.mutex);
    if (shared.owner == getpid() &&
        std::any_of(shared.ledgers->begin(), shared.ledgers->end(),
                    [&](const auto& entry) { return entry.first == dsn; })) {
      return;  // open already
    }
  }
  try {
    Ledger::preopen(dsn);
  } catch (const std::exception& error) {
    CPLDebug("IDEM", "could not start opening the ledger ahead: %s", error.what());
  }
}

}  // namespace

namespace {

// The shared ledgers of this process, after a fork a new set (the parent's are left alone).
SharedLedgers& own_shared_ledgers() {
  SharedLedgers& shared = shared_ledgers();
  if (shared.owner != getpid()) {
    shared.ledgers = new LedgerList();  // the parent's, with their connections, left as they are
    shared.lookups = new std::map<std::string, DigestCache*>();
    shared.owner = getpid();
  }
  return shared;
}

}  // namespace

std::shared_ptr<WorkerLedger> shared_ledger(const std::string& dsn) {
  std::lock_guard<std::mutex> lock(shared_ledgers().mutex);
  SharedLedgers& shared = own_shared_ledgers();
  LedgerList& ledgers = *shared.ledgers;
  const auto found = std::find_if(ledgers.begin(), ledgers.end(),
                                  [&](const auto& entry) { return entry.first == dsn; });
  if (found != ledgers.end()) {
    ledgers.splice(ledgers.begin(), ledgers, found);
  } else {
    ledgers.emplace_front(dsn, std::shared_ptr<Ledger>(Ledger::open(dsn)));
    while (ledgers.size() > k_kept_ledgers) {
      ledgers.pop_back();  // closed now, or when the last call using it ends
    }
  }
  return ledgers.front().second;
}

DigestCache& shared_lookup_digest_cache(const std::string& dsn) {
  std::lock_guard<std::mutex> lock(shared_ledgers().mutex);
  SharedLedgers& shared = own_shared_ledgers();
  auto found = shared.lookups->find(dsn);
  if (found == shared.lookups->end()) {
    found =
        shared.lookups->emplace(dsn, new LookupOnlyDigestCache(Ledger::open_read_only(dsn))).first;
  }
  return *found->second;
}

void note_vsiidem_use() {
  // The process (pid) in which the first use began, and in which it has ended: another thread's
  // use waits for it, so that its own write finds the connection started.
  static std::atomic<pid_t> began{0};
  static std::atomic<pid_t> ended{0};
  const pid_t pid = getpid();
  if (ended.load() != pid) {
    pid_t before = began.load();
    if (before != pid && began.compare_exchange_strong(before, pid)) {
      try {
        start_opening_ledger_ahead();
      } catch (...) {
        // Never leave the other threads waiting: without it the driver connects itself.
      }
      ended = pid;
      return;
    }
    while (ended.load() != pid) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  Ledger::advance_preopened();
}

// A deferred unlink carried out at the end of a process (a user's own delete through /vsiidem/)
// first invalidates the completed rows whose fingerprint is the file about to go (vsiidem checked
// it is still the file the unlink saw); rows of other files and rows in flight stay.
bool forget_before_unlink(const std::string& real_path) {
  const char* dsn = CPLGetConfigOption("IDEM_LEDGER", "");
  try {
    const std::optional<std::string> sqlite_path = Ledger::sqlite_path_of(dsn);
    VSIStatBufL info;
    if (sqlite_path && VSIStatL(sqlite_path->c_str(), &info) != 0) {
      return true;  // no ledger was ever made there, so no row records this output
    }
    const std::unique_ptr<WorkerLedger> ledger = Ledger::open(dsn);
    for (const LedgerRow& row : ledger->rows_on_output(real_path, RowState::k_completed)) {
      if (row.fingerprint && output_matches(real_path, *row.fingerprint, nullptr)) {
        ledger->invalidate(row.work_key, row.claim_token);
      }
    }
    return true;
  } catch (const Error& error) {
    CPLError(CE_Warning, CPLE_AppDefined,
             "IDEM: %s was not deleted because its ledger rows could not be removed first: %s",
             real_path.c_str(), error.what());
    return false;
  }
}

}  // namespace idem
