// SPDX-License-Identifier: MIT
// The /vsiidem/ handler's shared state and helpers (vsiidem_state.hpp).
#include "vsiidem_state.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "base/file_copy.hpp"
#include "base/file_identity.hpp"
#include "base/paths.hpp"
#include "base/safe_delete.hpp"
#include "cpl_conv.h"
#include "cpl_error.h"
#include "cpl_string.h"
#include "cpl_vsi.h"
#include "cpl_vsi_error.h"
#include "store/object_store.hpp"
#include "work/atomic_output.hpp"
#include "work/destination_guard.hpp"

namespace idem::vsiidem_detail {

bool is_write_access(const char* access) {
  return std::strchr(access, 'w') != nullptr || std::strchr(access, 'a') != nullptr ||
         std::strchr(access, '+') != nullptr;
}

bool truncates(const char* access) {
  return std::strchr(access, 'w') != nullptr;
}

std::string strip_prefix(const char* vsi_path) {
  const std::string path = vsi_path == nullptr ? std::string() : std::string(vsi_path);
  return is_vsiidem_path(path) ? vsiidem_real_path(path) : path;
}

// vsiidem_set_use_hook's hook, called before each Stat and Open.
std::atomic<void (*)()> g_use_hook{nullptr};

void note_use() {
  if (auto* hook = g_use_hook.load()) {
    hook();
  }
}

std::string real_absolute(const char* vsi_path) {
  return absolute_path(strip_prefix(vsi_path));
}

VSIFilesystemHandler* handler_for(const std::string& real_path) {
  return VSIFileManager::GetHandler(real_path.c_str());
}

bool cached_as_existing(const std::string& real) {
  VSIStatBufL info;
  const int cached_only = VSI_STAT_EXISTS_FLAG | VSI_STAT_CACHE_ONLY;
  return handler_for(real)->Stat(real.c_str(), &info, cached_only) == 0;
}

bool local_path(const std::string& path) {
  return !is_vsi_path(path);
}

bool publishable(const std::string& path) {
  return local_path(path) || is_object_store_path(path);
}

bool durable_writes() {
  return CPLTestBool(CPLGetConfigOption("IDEM_FSYNC", "YES"));
}

bool may_write(const std::string& real, bool replaces, std::optional<DirectoryHandle>* directory) {
  if (is_object_store_path(real)) {
    return true;
  }
  try {
    std::optional<DirectoryHandle> opened = open_destination_directory(real);
    DestinationRules rules;
    rules.ledger_dsn = CPLGetConfigOption("IDEM_LEDGER", "");
    rules.directory_dataset = true;
    rules.replaces = replaces;
    if (opened) {
      check_destination(real, rules, &*opened);
    }
    if (directory != nullptr) {
      *directory = std::move(opened);
    }
    return true;
  } catch (const Error& error) {
    CPLError(CE_Failure, CPLE_NotSupported, "/vsiidem/: %s", error.what());
    errno = EPERM;
    return false;
  }
}

void copy_published(const std::string& real, const AtomicOutput& output) {
  if (!local_path(real)) {
    copy_vsi_file(real, output.temp_path());  // an object: download it
    return;
  }
  copy_file_contents(output.directory().reach(basename_of(real)), output.temp_path());
}

ObservedFile local_identity(const VSIStatBufL& info) {
  ObservedFile identity;
  identity.size = static_cast<int64_t>(info.st_size);
  identity.mtime_ns = mtime_ns_of(info);
  identity.device = static_cast<uint64_t>(info.st_dev);
  identity.inode = static_cast<uint64_t>(info.st_ino);
  return identity;
}

std::optional<ObservedFile> current_identity(const std::string& real) {
  if (local_path(real)) {
    VSIStatBufL info;
    // Never through a link: a link at the name is not a file a deferred unlink may remove.
    if (::lstat64(real.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) {
      return std::nullopt;
    }
    return local_identity(info);
  }
  // Not there, or the store could not tell: either way nothing is seen that a delete may remove.
  const ObjectLook look = look_at_object(real, true);
  if (look.found != ObjectLook::Found::k_object || look.headers.etag.empty()) {
    return std::nullopt;
  }
  ObservedFile identity;
  identity.size = look.headers.size;
  identity.etag = look.headers.etag;
  return identity;
}

bool still_observed(const std::string& path, const PendingUnlink& pending) {
  if (!pending.observed) {
    return false;
  }
  const std::optional<ObservedFile> now = current_identity(path);
  return now && *now == *pending.observed;
}

int remove_observed(const std::string& path, const ObservedFile& observed) {
  if (!local_path(path)) {
    return VSIUnlink(path.c_str());
  }
  // Invariant I1: through the one delete owner, only while it is still the file observed.
  KnownFile file{path, observed.size, observed.mtime_ns, static_cast<dev_t>(observed.device),
                 static_cast<ino_t>(observed.inode)};
  switch (delete_known_file(file)) {
    case DeleteOutcome::k_deleted:
      return 0;
    case DeleteOutcome::k_absent:
      errno = ENOENT;
      return -1;
    case DeleteOutcome::k_not_ours:
      errno = EPERM;
      return -1;
    case DeleteOutcome::k_failed:
      break;
  }
  return -1;
}

bool in_dataset_group(const std::string& destination, const std::string& path) {
  if (path == destination) {
    return true;
  }
  if (dirname_of(path) != dirname_of(destination)) {
    return false;
  }
  const std::string name = basename_of(path);
  std::string stem = basename_of(destination);
  const size_t dot = stem.rfind('.');
  if (dot != std::string::npos && dot > 0) {
    stem.resize(dot);
  }
  return name.size() > stem.size() + 1 && name.compare(0, stem.size() + 1, stem + ".") == 0;
}

bool call_hook(const UnlinkHook& hook, const std::string& real_path) {
  try {
    return hook(real_path);
  } catch (const std::exception& error) {
    CPLError(CE_Warning, CPLE_AppDefined, "gdal-idem: %s was kept: %s", real_path.c_str(),
             error.what());
  } catch (...) {
    CPLError(CE_Warning, CPLE_AppDefined, "gdal-idem: %s was kept: unexpected error",
             real_path.c_str());
  }
  return false;
}

VsiIdemState& state() {
  static auto* instance = new VsiIdemState();
  return *instance;
}

// The last chance of a process that never unloads GDAL's drivers (Python: osgeo.gdal, rasterio)
// to carry out its deferred unlinks. By the time exit handlers run, the C++ runtime has
// destroyed the main thread's thread_local objects, among them the connections GDAL's network
// file systems (/vsis3/, ...) keep per thread: a request from this thread crashes or loops
// (GDAL 3.6). A new thread has its own, so the flush runs on one.
void flush_at_exit() {
  auto& shared = state();
  {
    VsiIdemState::Locked view = shared.lock();
    view.own_pending_unlinks();
    if (view.pending_unlinks().empty()) {
      return;  // all cancelled or carried out: no thread for nothing
    }
  }
  try {
    std::thread worker([&shared] { shared.flush(VsiIdemState::FlushPoint::k_exit); });
    worker.join();
  } catch (const std::system_error&) {
    // No thread: local files can still go; objects are reported, not risked.
    shared.flush(VsiIdemState::FlushPoint::k_exit_local_only);
  }
}

// VsiIdemState's members (vsiidem_state.hpp).

VsiIdemState::Locked VsiIdemState::lock() {
  return Locked(*this);
}

void VsiIdemState::Locked::register_exit_flush() {
  if (!m_state.m_exit_flush_registered) {
    m_state.m_exit_flush_registered = std::atexit(flush_at_exit) == 0;
  }
}

void VsiIdemState::Locked::note_found(const std::string& real) {
  auto& found = m_state.m_found_by_stat;
  if (std::find(found.begin(), found.end(), real) != found.end()) {
    return;
  }
  if (found.size() == VsiIdemState::k_found_by_stat_kept) {
    found.pop_front();
  }
  found.push_back(real);
}

void VsiIdemState::Locked::note_listing(const std::string& directory, std::set<std::string> names) {
  m_state.m_listed_dir = directory;
  m_state.m_listed_names = std::move(names);
}

bool VsiIdemState::Locked::saw_exist(const std::string& real) const {
  const size_t slash = real.rfind('/');
  const std::string dir = slash == 0 ? "/" : real.substr(0, slash);
  const auto& found = m_state.m_found_by_stat;
  return (slash != std::string::npos && dir == m_state.m_listed_dir &&
          m_state.m_listed_names.count(real.substr(slash + 1)) != 0) ||
         std::find(found.begin(), found.end(), real) != found.end();
}

std::map<std::string, PendingUnlink> VsiIdemState::Locked::take_unadopted() {
  own_pending_unlinks();
  std::map<std::string, PendingUnlink> taken;
  auto& pending = m_state.m_pending_unlinks;
  for (auto it = pending.begin(); it != pending.end();) {
    if (it->second.adoption != 0) {
      ++it;  // an IDEM call in progress resolves it
    } else {
      taken.insert(*it);
      it = pending.erase(it);
    }
  }
  return taken;
}

void VsiIdemState::Locked::defer_unlink(const std::string& real,
                                        const std::optional<ObservedFile>& observed) {
  register_exit_flush();
  own_pending_unlinks();
  PendingUnlink& pending = m_state.m_pending_unlinks[real];
  pending = PendingUnlink{};
  pending.number = ++m_state.m_unlink_count;
  pending.thread = std::this_thread::get_id();
  pending.observed = observed;
  CPLDebug(k_debug_category, "unlink of %s deferred", real.c_str());
}

uint64_t VsiIdemState::Locked::adopt(const std::string& destination) {
  own_pending_unlinks();
  const auto self = std::this_thread::get_id();
  const auto primary = m_state.m_pending_unlinks.find(destination);
  const bool primary_pending = primary != m_state.m_pending_unlinks.end() &&
                               primary->second.adoption == 0 && primary->second.thread == self;
  const uint64_t since = primary_pending ? primary->second.number : 0;
  const std::string under = destination + "/";
  const uint64_t adoption = m_state.m_adoption_count + 1;
  bool adopted = false;
  for (auto& [path, pending] : m_state.m_pending_unlinks) {
    if (pending.adoption != 0 || pending.thread != self) {
      continue;
    }
    if ((primary_pending && pending.number >= since && in_dataset_group(destination, path)) ||
        path.compare(0, under.size(), under) == 0) {
      pending.adoption = adoption;
      adopted = true;
      CPLDebug(k_debug_category, "unlink of %s left to the IDEM call writing %s", path.c_str(),
               destination.c_str());
    }
  }
  if (!adopted) {
    return 0;
  }
  m_state.m_adoption_count = adoption;
  return adoption;
}

void VsiIdemState::Locked::keep_dataset_of_refused(const std::string& real) {
  own_pending_unlinks();
  const auto self = std::this_thread::get_id();
  for (auto it = m_state.m_pending_unlinks.begin(); it != m_state.m_pending_unlinks.end();) {
    if (it->second.adoption == 0 && it->second.thread == self &&
        in_dataset_group(real, it->first)) {
      CPLDebug(k_debug_category, "unlink of %s cancelled: the write of %s was refused",
               it->first.c_str(), real.c_str());
      it = m_state.m_pending_unlinks.erase(it);
    } else {
      ++it;
    }
  }
  if (std::find(m_state.m_refused.begin(), m_state.m_refused.end(), real) !=
      m_state.m_refused.end()) {
    return;
  }
  if (m_state.m_refused.size() == VsiIdemState::k_refused_kept) {
    m_state.m_refused.pop_front();
  }
  m_state.m_refused.push_back(real);
}

std::string VsiIdemState::Locked::refused_dataset_of(const std::string& real) {
  const auto again = std::find(m_state.m_refused.begin(), m_state.m_refused.end(), real);
  if (again != m_state.m_refused.end()) {
    m_state.m_refused.erase(again);
    return {};
  }
  for (const std::string& refused : m_state.m_refused) {
    if (in_dataset_group(refused, real)) {
      return refused;
    }
  }
  return {};
}

std::vector<std::pair<std::string, PendingUnlink>> VsiIdemState::Locked::take_adopted(
    uint64_t adoption) {
  std::vector<std::pair<std::string, PendingUnlink>> taken;
  for (auto it = m_state.m_pending_unlinks.begin(); it != m_state.m_pending_unlinks.end();) {
    if (adoption != 0 && it->second.adoption == adoption) {
      taken.emplace_back(it->first, it->second);
      it = m_state.m_pending_unlinks.erase(it);
    } else {
      ++it;
    }
  }
  return taken;
}

void VsiIdemState::Locked::own_pending_unlinks() {
  const pid_t self = getpid();
  if (m_state.m_pending_pid != self) {
    if (m_state.m_pending_pid != 0 && !m_state.m_pending_unlinks.empty()) {
      CPLDebug(k_debug_category, "%d deferred unlinks of the parent process left to it",
               static_cast<int>(m_state.m_pending_unlinks.size()));
    }
    m_state.m_pending_unlinks.clear();
    m_state.m_pending_pid = self;
  }
}

void VsiIdemState::Locked::note_object_look(const std::string& real, bool missing) {
  if (!missing) {
    m_state.m_missing_looks.erase(real);
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (m_state.m_missing_looks.size() >= m_state.m_missing_looks_prune_at) {
    // A process that looks at many objects: expired entries go, and the next pass waits for
    // the map to double, so a burst of looks costs amortised constant time each.
    for (auto it = m_state.m_missing_looks.begin(); it != m_state.m_missing_looks.end();) {
      it = now - it->second.when > k_missing_look_lifetime ? m_state.m_missing_looks.erase(it)
                                                           : std::next(it);
    }
    m_state.m_missing_looks_prune_at = std::max<size_t>(64, 2 * m_state.m_missing_looks.size());
  }
  m_state.m_missing_looks[real] = VsiIdemState::MissingLook{now, m_state.m_changes};
}

bool VsiIdemState::Locked::take_missing_look(const std::string& real) {
  const auto it = m_state.m_missing_looks.find(real);
  if (it == m_state.m_missing_looks.end()) {
    return false;
  }
  const VsiIdemState::MissingLook look = it->second;
  m_state.m_missing_looks.erase(it);
  return look.changes == m_state.m_changes &&
         std::chrono::steady_clock::now() - look.when <= k_missing_look_lifetime;
}

std::shared_ptr<InFlight> VsiIdemState::Locked::live_entry(const std::string& real) {
  auto it = m_state.m_in_flight.find(real);
  if (it == m_state.m_in_flight.end() || it->second->discard) {
    return nullptr;
  }
  return it->second;
}

void VsiIdemState::flush(FlushPoint point) {
  std::map<std::string, PendingUnlink> paths;
  UnlinkHook hook;
  {
    Locked view = lock();
    paths = view.take_unadopted();
    hook = view.hook();
  }
  for (const auto& [path, pending] : paths) {
    if (!local_path(path) && point == FlushPoint::k_gdal_cleanup) {
      // GDAL's file manager is being torn down: no VSI call is safe any more.
      CPLError(CE_Warning, CPLE_FileIO, "gdal-idem: deferred delete of %s skipped at GDAL cleanup",
               path.c_str());
      continue;
    }
    if (!local_path(path) && point == FlushPoint::k_exit_local_only) {
      CPLError(CE_Warning, CPLE_FileIO,
               "gdal-idem: deferred delete of %s skipped at exit: no thread could be "
               "started to reach it",
               path.c_str());
      continue;
    }
    if (!pending.observed) {
      continue;  // nothing was seen there: nothing to delete
    }
    const std::optional<ObservedFile> now = current_identity(path);
    if (!now && !local_path(path)) {
      // The store did not answer (or the object is gone): nothing is deleted unchecked.
      CPLError(CE_Warning, CPLE_FileIO,
               "gdal-idem: deferred delete of %s failed: the object could not be checked "
               "to be the one the delete saw (the store did not answer, or it is gone), "
               "so nothing was deleted",
               path.c_str());
      continue;
    }
    if (!now || !(*now == *pending.observed)) {
      CPLDebug(k_debug_category,
               "deferred unlink of %s not carried out: the file there is not the one the "
               "unlink saw",
               path.c_str());
      continue;
    }
    if (hook && !call_hook(hook, path)) {
      continue;  // the hook keeps the file (its ledger rows could not be removed)
    }
    const int result = remove_observed(path, *pending.observed);
    lock().note_change();
    if (result == 0) {
      CPLDebug(k_debug_category, "carried out the deferred unlink of %s%s", path.c_str(),
               point == FlushPoint::k_gdal_cleanup ? " (GDAL cleanup)"
               : point == FlushPoint::k_running    ? ""
                                                   : " (end of the process)");
    } else if (errno != ENOENT) {
      CPLError(CE_Warning, CPLE_FileIO, "gdal-idem: deferred delete of %s failed: %s", path.c_str(),
               std::strerror(errno));
    }
  }
}

}  // namespace idem::vsiidem_detail
