// SPDX-License-Identifier: MIT
// The /vsiidem/ handler's process-wide state and the helpers its parts share: the files in flight,
// the deferred unlinks and their identities, looks at the file system. Internal to plugin/ (the
// handler in vsiidem.cpp, the write handle in vsiidem_write.cpp, the state in vsiidem_state.cpp).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/directory_handle.hpp"
#include "cpl_vsi.h"
#include "cpl_vsi_error.h"
#include "cpl_vsi_virtual.h"
#include "vsiidem.hpp"
#include "work/atomic_output.hpp"

namespace idem::vsiidem_detail {

inline constexpr const char* k_debug_category = "VSIIDEM";

bool is_write_access(const char* access);

bool truncates(const char* access);

// The path a /vsiidem/ name stands for: "/vsiidem/a" -> "a", "/vsiidem//x" -> "/x",
// "/vsiidem" or "/vsiidem/" -> "." (the working directory, as GDAL's CPLGetDirname yields it).
std::string strip_prefix(const char* vsi_path);

// vsiidem_set_use_hook's hook, called before each Stat and Open.
extern std::atomic<void (*)()> g_use_hook;

void note_use();

// The absolute, lexically normalised real path recorded for a /vsiidem/ name (the same form the
// driver stores in the ledger: idem::absolute_path).
std::string real_absolute(const char* vsi_path);

// How long a Stat that found an object missing answers a read-open of it (see
// VsiIdemFilesystemHandler::Open).
inline constexpr std::chrono::seconds k_missing_look_lifetime{2};

VSIFilesystemHandler* handler_for(const std::string& real_path);

// Whether GDAL's cache of an object's properties knows it to exist (no request is sent): true
// after this process wrote it, through any path.
bool cached_as_existing(const std::string& real);

bool local_path(const std::string& path);

// Local files are published by rename, objects by upload from a local temporary file.
bool publishable(const std::string& path);

bool durable_writes();

// Invariant I2 for every path /vsiidem/ writes, deletes, renames, makes or removes, whichever
// driver asks: the one destination guard (check_destination) with IDEM_LEDGER's ledger: never a
// link, a special file, the ledger or its companions; when `replaces` (a truncating open, a
// delete, either end of a rename), never a file this process has open, which a plain driver's
// source is. A directory is left to the callers (EISDIR). False (errno EPERM, a CPLError saying
// why) when refused. For a local path whose directory exists, `directory` (when given) gets the
// handle of that directory the check looked through, for the act to use.
bool may_write(const std::string& real, bool replaces,
               std::optional<DirectoryHandle>* directory = nullptr);

// Copy the published file `real` (a local file, read through the handle of the directory
// `output` writes into, or an object) into the temporary file `output` writes: r+ and a opens of
// a published file modify a copy, never the file in place.
void copy_published(const std::string& real, const AtomicOutput& output);

// A file being written through /vsiidem/: its temporary home and how many handles write it.
struct InFlight {
  std::unique_ptr<AtomicOutput> output;
  int writers = 0;
  bool discard = false;  // unlinked while open: never published
};

void flush_at_exit();

// A call of the handler refused: errno is `error_number`, and, with `set_error`, GDAL's last
// file-system error says "<name>: <why>". Returns `failed` (nullptr, -1...): the one spelling of
// `return refuse(...)` in the handler's overrides.
template <typename T>
T refuse(T failed, int error_number, bool set_error, const std::string& name, const char* why) {
  errno = error_number;
  if (set_error) {
    VSIError(VSIE_FileError, "%s: %s", name.c_str(), why);
  }
  return failed;
}

// What an unlink saw at a path, so that a deferred unlink removes that file and no other.
// Local files: device, inode, size and mtime. Objects: size and the store's ETag.
struct ObservedFile {
  int64_t size = -1;
  int64_t mtime_ns = 0;
  uint64_t device = 0;
  uint64_t inode = 0;
  std::string etag;
  bool operator==(const ObservedFile& other) const {
    return size == other.size && mtime_ns == other.mtime_ns && device == other.device &&
           inode == other.inode && etag == other.etag;
  }
};

ObservedFile local_identity(const VSIStatBufL& info);

// What is at `real` now, asked of its file system (an object store: of the store, not of
// GDAL's cache: a request). nullopt when nothing is there, or no ETag to tell objects apart.
std::optional<ObservedFile> current_identity(const std::string& real);

// A deferred unlink: its number (m_unlink_count), the thread that asked for it, what it saw, and
// the IDEM call (adoption number) that resolves it, 0 when none does.
struct PendingUnlink {
  uint64_t number = 0;
  std::thread::id thread;
  std::optional<ObservedFile> observed;
  uint64_t adoption = 0;
};

// Whether the file at `path` is the one the deferred unlink saw (nothing unknown is deleted).
bool still_observed(const std::string& path, const PendingUnlink& pending);

// Removes the file the deferred unlink observed at `path` (a local file through the one delete
// owner, safe_delete.hpp: never through a link, only while it is still that file): 0, or -1 with
// errno (EPERM when another file is there now).
int remove_observed(const std::string& path, const ObservedFile& observed);

// Whether `path` is one of the files of the dataset at `destination` as GDAL names them: the
// destination itself, or a file beside it whose name is the destination's stem and a dot
// (a.tif -> a.tif.aux.xml, a.tif.ovr, a.tfw, a.aux.xml).
bool in_dataset_group(const std::string& destination, const std::string& path);

// The unlink hook's verdict on `real_path`: false (the file is kept) when it says so or throws.
bool call_hook(const UnlinkHook& hook, const std::string& real_path);

// What is at a path, asked of its file system.
struct FileLook {
  bool exists = false;
  VSIStatBufL info{};
  uint64_t changes = 0;  // the state's count of changes when it was asked
};

// Process-wide state of the handler this copy installed. Leaked on purpose: it must outlive
// static destruction, since the flush can run from atexit or from GDAL's cleanup. Its members are
// reached only through lock(), which returns a view holding the state's mutex: a method of the
// view is one the lock is held for.
class VsiIdemState {
 public:
  // Where a flush runs: GDAL's file manager may be gone at its cleanup, and a thread without
  // network state of its own is needed at exit (see flush_at_exit); without one, only local
  // files can be deleted there.
  enum class FlushPoint { k_running, k_exit, k_exit_local_only, k_gdal_cleanup };

  class Locked;
  // The state, its mutex held for as long as the view lives.
  Locked lock();

  // Carry out every pending unlink that no IDEM call holds: only when the file is still the one
  // the unlink saw, hook first (ledger rows), then the file. Each path is taken out of the set
  // before it is handled, so every unlink runs at most once. Takes the lock itself.
  void flush(FlushPoint point);

 private:
  friend class Locked;

  std::mutex m_mutex;
  std::map<std::string, std::shared_ptr<InFlight>> m_in_flight;  // by absolute final path
  // Deferred unlinks by absolute real path (see PendingUnlink).
  std::map<std::string, PendingUnlink> m_pending_unlinks;
  uint64_t m_unlink_count = 0;
  uint64_t m_adoption_count = 0;
  // The process the pending unlinks belong to: a child forked from it inherits them, but they
  // are its parent's to carry out (or cancel), never the child's (see own_pending_unlinks).
  pid_t m_pending_pid = 0;
  // Counts what this process did to which files exist (publishes, renames, deferred unlinks
  // carried out). A look at a path taken outside the mutex (see look_at) still holds while the
  // count has not moved.
  uint64_t m_changes = 0;
  // Paths whose last writer closed and whose file is being renamed or uploaded into place, with
  // how many closes publish there at once. Publishing runs outside the mutex: an upload can take
  // seconds, and other threads' /vsiidem/ calls must not wait for it.
  std::map<std::string, int> m_publishing;
  // Objects a Stat just found missing, each with when and m_changes then. A read-open of one
  // takes its entry out (see VsiIdemFilesystemHandler::Open).
  struct MissingLook {
    std::chrono::steady_clock::time_point when;
    uint64_t changes = 0;
  };
  std::map<std::string, MissingLook> m_missing_looks;
  size_t m_missing_looks_prune_at = 64;  // its size at which expired entries are dropped
  UnlinkHook m_hook;                     // vsiidem_set_unlink_hook
  bool m_exit_flush_registered = false;
  // What this process last saw exist through /vsiidem/: the names of its last directory
  // listing and of its last few successful Stat calls. A delete of one of them that another
  // process removed since succeeds (see VsiIdemFilesystemHandler::Unlink).
  std::string m_listed_dir;
  std::set<std::string> m_listed_names;
  std::deque<std::string> m_found_by_stat;
  static constexpr size_t k_found_by_stat_kept = 16;
  std::deque<std::string> m_refused;  // the last few paths whose write or delete was refused
  static constexpr size_t k_refused_kept = 16;
};

// The state with its mutex held (VsiIdemState::lock()).
class VsiIdemState::Locked {
 public:
  Locked(Locked&&) = default;

  std::map<std::string, std::shared_ptr<InFlight>>& in_flight() { return m_state.m_in_flight; }
  std::map<std::string, PendingUnlink>& pending_unlinks() { return m_state.m_pending_unlinks; }
  bool unlink_pending(const std::string& real) const {
    return m_state.m_pending_unlinks.count(real) != 0;
  }
  std::map<std::string, int>& publishing() { return m_state.m_publishing; }
  // Something this process did changed which files exist.
  void note_change() { ++m_state.m_changes; }
  uint64_t changes() const { return m_state.m_changes; }
  const UnlinkHook& hook() const { return m_state.m_hook; }
  void set_hook(UnlinkHook hook) { m_state.m_hook = std::move(hook); }

  // The live (not discarded) in-flight entry for `real`, or nullptr.
  std::shared_ptr<InFlight> live_entry(const std::string& real);

  // A successful Stat found `real`; a listing of `directory` showed `names`.
  void note_found(const std::string& real);
  void note_listing(const std::string& directory, std::set<std::string> names);
  // Whether this process saw `real` exist (its last listing, or a recent Stat).
  bool saw_exist(const std::string& real) const;

  // Record a deferred unlink of `real`, numbered after every earlier one, with what it saw there.
  void defer_unlink(const std::string& real, const std::optional<ObservedFile>& observed);

  // The deferred unlinks that GDAL's pre-delete of `destination` made on this thread: the
  // destination's own and those of its dataset's other files (same directory, names starting
  // with its stem and a dot), made since the destination's; and, for a directory dataset (Zarr),
  // those of the files under it (GDAL 3.11+ deletes the files of a directory dataset, and
  // cannot remove its directories while the unlinks are deferred). Marked as the IDEM call's,
  // which resolves them (vsiidem_resolve_pre_delete). Returns the adoption's number, 0 when
  // nothing was pending.
  uint64_t adopt(const std::string& destination);

  // A write or delete of `real` was refused (a source of this work, the ledger, a link...): the
  // deferred unlinks this thread made of its dataset's files (itself, and the names beside it
  // that start with its stem and a dot) are taken out, so the files stay; and a later delete of
  // one of them is refused too (GDAL goes on deleting a dataset's other files when its first
  // delete fails).
  void keep_dataset_of_refused(const std::string& real);
  // The refused path whose dataset `real` belongs to, or "". A delete of the refused path itself
  // starts over (a retry, once the source is closed) and is asked again.
  std::string refused_dataset_of(const std::string& real);

  // Take the adoption's deferred unlinks out: the files stay as they are.
  std::vector<std::pair<std::string, PendingUnlink>> take_adopted(uint64_t adoption);
  // The pending unlinks no IDEM call holds, taken out (a flush carries them out).
  std::map<std::string, PendingUnlink> take_unadopted();

  // In a forked child, forget the pending unlinks inherited from the parent.
  void own_pending_unlinks();

  // Record what a Stat of the object `real` answered.
  void note_object_look(const std::string& real, bool missing);
  // Takes out the entry of `real` and tells whether it still stands: recent, and nothing this
  // process did has changed files since.
  bool take_missing_look(const std::string& real);

  // Looks at `real` for as long as `needed()` says so (asked with the lock held). The look is
  // taken with the lock released: on object storage it is a request, which must not hold up this
  // process's other /vsiidem/ calls. It is used only if nothing this process did changed files
  // meanwhile, else taken again; after three such tries it is taken with the lock held, so that a
  // busy process still gets an answer.
  template <class Needed>
  std::optional<FileLook> look_at(const std::string& real, Needed needed);

  // The lock let go for `outside` (a publish, which can take seconds), then taken again.
  template <class Outside>
  auto unlocked(Outside outside) -> decltype(outside());

 private:
  friend class VsiIdemState;
  Locked(VsiIdemState& state) : m_state(state), m_lock(state.m_mutex) {}
  // The exit handler is registered with the first deferred unlink, after GDAL's file system
  // for it answered a request: static objects GDAL created for that request are destroyed
  // after the handler runs, not before.
  void register_exit_flush();

  VsiIdemState& m_state;
  std::unique_lock<std::mutex> m_lock;
};

VsiIdemState& state();

template <class Needed>
std::optional<FileLook> VsiIdemState::Locked::look_at(const std::string& real, Needed needed) {
  std::optional<FileLook> look;
  for (int tries = 0; needed() && !(look && look->changes == m_state.m_changes); ++tries) {
    look.emplace();
    look->changes = m_state.m_changes;
    if (tries < 3) {
      m_lock.unlock();
    }
    look->exists = handler_for(real)->Stat(real.c_str(), &look->info, VSI_STAT_EXISTS_FLAG) == 0;
    if (!m_lock.owns_lock()) {
      m_lock.lock();
    }
  }
  return look;
}

template <class Outside>
auto VsiIdemState::Locked::unlocked(Outside outside) -> decltype(outside()) {
  m_lock.unlock();
  struct Relock {
    std::unique_lock<std::mutex>& lock;
    ~Relock() { lock.lock(); }
  } relock{m_lock};
  return outside();
}

}  // namespace idem::vsiidem_detail
