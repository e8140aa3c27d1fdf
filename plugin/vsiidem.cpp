// The /vsiidem/ virtual filesystem (see vsiidem.hpp): a C++ VSIFilesystemHandler that maps
// /vsiidem/<path> to <path>, writes every file opened for writing into a temporary directory
// beside it (AtomicOutput) and renames it into place when its last writing handle closes, and
// defers unlinks to the end of the process so that GDAL's pre-delete before CreateCopy
// (docs/internals.md §4, §6) cannot destroy an output that IDEM then skips.
//
// The driver calls the functions below directly (one copy of this code per process: nothing
// links the plugin). Bindings reach the few documented operations through GDAL's own
// VSIGetFileMetadata / VSISetFileMetadata on the domains below (docs/vsiidem.md).
#include "vsiidem.hpp"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "base/gdal_compat.hpp"
#include "base/object_store.hpp"
#include "base/paths.hpp"
#include "cpl_conv.h"
#include "cpl_error.h"
#include "cpl_string.h"
#include "cpl_vsi.h"
#include "cpl_vsi_error.h"
#include "cpl_vsi_virtual.h"
#include "gdal_version.h"
#include "work/atomic_output.hpp"
#include "work/lease.hpp"

namespace idem {

namespace {

constexpr const char* k_debug_category = "VSIIDEM";

// The documented domains of the handler's Get/SetFileMetadata (docs/vsiidem.md).
constexpr const char* k_domain_handler = "IDEM_HANDLER";                // get: VERSION=1
constexpr const char* k_domain_unlink_pending = "IDEM_UNLINK_PENDING";  // get: PENDING=YES|NO
constexpr const char* k_domain_cancel_unlink = "IDEM_CANCEL_UNLINK";    // set
constexpr const char* k_domain_flush_unlinks = "IDEM_FLUSH_UNLINKS";    // set

bool is_write_access(const char* access) {
  return std::strchr(access, 'w') != nullptr || std::strchr(access, 'a') != nullptr ||
         std::strchr(access, '+') != nullptr;
}

bool truncates(const char* access) {
  return std::strchr(access, 'w') != nullptr;
}

std::string random_token() {
  std::random_device device;
  std::uniform_int_distribution<std::uint32_t> distribution;
  char text[32];
  std::snprintf(text, sizeof(text), "%08" PRIx32 "%08" PRIx32, distribution(device),
                distribution(device));
  return text;
}

// The path a /vsiidem/ name stands for: "/vsiidem/a" -> "a", "/vsiidem//x" -> "/x",
// "/vsiidem" or "/vsiidem/" -> "." (the working directory, as GDAL's CPLGetDirname yields it).
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

// The absolute, lexically normalised real path recorded for a /vsiidem/ name (the same form the
// driver stores in the ledger: idem::absolute_path).
std::string real_absolute(const char* vsi_path) {
  return absolute_path(strip_prefix(vsi_path));
}

// How long a Stat that found an object missing answers a read-open of it (see
// VsiIdemFilesystemHandler::Open).
constexpr std::chrono::seconds k_missing_look_lifetime{2};

VSIFilesystemHandler* handler_for(const std::string& real_path) {
  return VSIFileManager::GetHandler(real_path.c_str());
}

// Whether GDAL's cache of an object's properties knows it to exist (no request is sent): true
// after this process wrote it, through any path.
bool cached_as_existing(const std::string& real) {
  VSIStatBufL info;
  const int cached_only = VSI_STAT_EXISTS_FLAG | VSI_STAT_CACHE_ONLY;
  return handler_for(real)->Stat(real.c_str(), &info, cached_only) == 0;
}

bool local_path(const std::string& path) {
  return !is_vsi_path(path);
}

// Local files are published by rename, objects by upload from a local temporary file.
bool publishable(const std::string& path) {
  return local_path(path) || is_object_store_path(path);
}

bool durable_writes() {
  return CPLTestBool(CPLGetConfigOption("IDEM_FSYNC", "YES"));
}

// Copy `from` into the new file `to` (reflink where the filesystem can, else bytes), keeping its
// permission bits: r+ and a opens of a published file modify a copy, never the file in place.
void copy_file_contents(const std::string& from, const std::string& to) {
  const int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) {
    throw Error(ErrorKind::k_io, "cannot open " + from + " to update it: " + std::strerror(errno));
  }
  struct stat info {};
  ::fstat(in, &info);
  const int out =
      ::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, info.st_mode & 07777);
  if (out < 0) {
    const int error_number = errno;
    ::close(in);
    throw Error(ErrorKind::k_io, "cannot create " + to + ": " + std::strerror(error_number));
  }
  bool copied = false;
#ifdef FICLONE
  copied = ::ioctl(out, FICLONE, in) == 0;
#endif
  // Not zero-filled (as copy_vsi_file): only the pages a read touches are faulted in.
  constexpr size_t k_chunk = 1 << 20;
  const std::unique_ptr<char[]> buffer(copied ? nullptr : new char[k_chunk]);
  while (!copied) {
    const ssize_t got = ::read(in, buffer.get(), k_chunk);
    if (got == 0) {
      copied = true;
      break;
    }
    if (got < 0) {
      if (errno == EINTR) {
        continue;
      }
      break;
    }
    ssize_t done = 0;
    while (done < got) {
      const ssize_t put = ::write(out, buffer.get() + done, static_cast<size_t>(got - done));
      if (put < 0) {
        if (errno == EINTR) {
          continue;
        }
        break;
      }
      done += put;
    }
    if (done < got) {
      break;
    }
  }
  const int error_number = errno;
  ::fchmod(out, info.st_mode & 07777);
  ::close(in);
  if (::close(out) != 0 || !copied) {
    throw Error(ErrorKind::k_io, "cannot copy " + from + " to " + to + ": " +
                                     std::strerror(error_number ? error_number : EIO));
  }
}

// Copy the published file `from` (a local file or an object) into the temporary file `to`.
void copy_published(const std::string& from, const std::string& to) {
  if (!local_path(from)) {
    copy_vsi_file(from, to);  // an object: download it
    return;
  }
  copy_file_contents(from, to);
}

/************************************************************************/
/*                           VsiIdemState                               */
/************************************************************************/

// A file being written through /vsiidem/: its temporary home and how many handles write it.
struct InFlight {
  std::unique_ptr<AtomicOutput> output;
  int writers = 0;
  bool discard = false;  // unlinked while open: never published
};

void flush_at_exit();

// What an unlink saw at a path, so that a deferred unlink removes that file and no other.
// Local files: device, inode, size and mtime. Objects: size and the store's ETag.
struct FileIdentity {
  int64_t size = -1;
  int64_t mtime_ns = 0;
  uint64_t device = 0;
  uint64_t inode = 0;
  std::string etag;
  bool operator==(const FileIdentity& other) const {
    return size == other.size && mtime_ns == other.mtime_ns && device == other.device &&
           inode == other.inode && etag == other.etag;
  }
};

FileIdentity local_identity(const VSIStatBufL& info) {
  FileIdentity identity;
  identity.size = static_cast<int64_t>(info.st_size);
  identity.mtime_ns = int64_t(info.st_mtim.tv_sec) * 1000000000 + info.st_mtim.tv_nsec;
  identity.device = static_cast<uint64_t>(info.st_dev);
  identity.inode = static_cast<uint64_t>(info.st_ino);
  return identity;
}

// What is at `real` now, asked of its file system (an object store: of the store, not of
// GDAL's cache: a request). nullopt when nothing is there, or no ETag to tell objects apart.
std::optional<FileIdentity> current_identity(const std::string& real) {
  if (local_path(real)) {
    VSIStatBufL info;
    if (::stat64(real.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) {
      return std::nullopt;
    }
    return local_identity(info);
  }
  const std::optional<ObjectHeaders> headers = object_headers(real, true);
  if (!headers || headers->etag.empty()) {
    return std::nullopt;
  }
  FileIdentity identity;
  identity.size = headers->size;
  identity.etag = headers->etag;
  return identity;
}

// A deferred unlink: its number (m_unlink_count), the thread that asked for it, what it saw, and
// the IDEM call (adoption number) that resolves it, 0 when none does.
struct PendingUnlink {
  uint64_t number = 0;
  std::thread::id thread;
  std::optional<FileIdentity> observed;
  uint64_t adoption = 0;
};

// Whether the file at `path` is the one the deferred unlink saw (nothing unknown is deleted).
bool still_observed(const std::string& path, const PendingUnlink& pending) {
  if (!pending.observed) {
    return false;
  }
  const std::optional<FileIdentity> now = current_identity(path);
  return now && *now == *pending.observed;
}

// Whether `path` is one of the files of the dataset at `destination` as GDAL names them: the
// destination itself, or a file beside it whose name is the destination's stem and a dot
// (a.tif -> a.tif.aux.xml, a.tif.ovr, a.tfw, a.aux.xml).
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

// The unlink hook's verdict on `real_path`: false (the file is kept) when it says so or throws.
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

// Process-wide state of the handler this copy installed. Leaked on purpose: it must outlive
// static destruction, since the flush can run from atexit or from GDAL's cleanup.
class VsiIdemState {
 public:
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
  // carried out). A look at a path taken outside m_mutex (see look_at) still holds while the
  // count has not moved.
  uint64_t m_changes = 0;
  // Paths whose last writer closed and whose file is being renamed or uploaded into place, with
  // how many closes publish there at once. Publishing runs outside m_mutex: an upload can take
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

  // The exit handler is registered with the first deferred unlink, after GDAL's file system
  // for it answered a request: static objects GDAL created for that request are destroyed
  // after the handler runs, not before. Caller holds m_mutex.
  void register_exit_flush() {
    if (!m_exit_flush_registered) {
      m_exit_flush_registered = std::atexit(flush_at_exit) == 0;
    }
  }

  // Record a deferred unlink of `real`, numbered after every earlier one, with what it saw there.
  // Caller holds m_mutex.
  void defer_unlink(const std::string& real, const std::optional<FileIdentity>& observed) {
    register_exit_flush();
    own_pending_unlinks();
    PendingUnlink& pending = m_pending_unlinks[real];
    pending = PendingUnlink{};
    pending.number = ++m_unlink_count;
    pending.thread = std::this_thread::get_id();
    pending.observed = observed;
    CPLDebug(k_debug_category, "unlink of %s deferred", real.c_str());
  }

  // The deferred unlinks that GDAL's pre-delete of `destination` made on this thread: the
  // destination's own and those of its dataset's other files (same directory, names starting
  // with its stem and a dot), made since the destination's; marked as the IDEM call's, which
  // resolves them (resolve_adopted). Returns the adoption's number, 0 when nothing was pending.
  // Caller holds m_mutex.
  uint64_t adopt(const std::string& destination) {
    own_pending_unlinks();
    const auto primary = m_pending_unlinks.find(destination);
    const auto self = std::this_thread::get_id();
    if (primary == m_pending_unlinks.end() || primary->second.adoption != 0 ||
        primary->second.thread != self) {
      return 0;
    }
    const uint64_t since = primary->second.number;
    const uint64_t adoption = ++m_adoption_count;
    for (auto& [path, pending] : m_pending_unlinks) {
      if (pending.adoption == 0 && pending.thread == self && pending.number >= since &&
          in_dataset_group(destination, path)) {
        pending.adoption = adoption;
        CPLDebug(k_debug_category, "unlink of %s left to the IDEM call writing %s", path.c_str(),
                 destination.c_str());
      }
    }
    return adoption;
  }

  // Take the adoption's deferred unlinks out (caller holds m_mutex): the files stay as they are.
  std::vector<std::pair<std::string, PendingUnlink>> take_adopted(uint64_t adoption) {
    std::vector<std::pair<std::string, PendingUnlink>> taken;
    for (auto it = m_pending_unlinks.begin(); it != m_pending_unlinks.end();) {
      if (adoption != 0 && it->second.adoption == adoption) {
        taken.emplace_back(it->first, it->second);
        it = m_pending_unlinks.erase(it);
      } else {
        ++it;
      }
    }
    return taken;
  }

  // In a forked child, forget the pending unlinks inherited from the parent. Caller holds
  // m_mutex.
  void own_pending_unlinks() {
    const pid_t self = getpid();
    if (m_pending_pid != self) {
      if (m_pending_pid != 0 && !m_pending_unlinks.empty()) {
        CPLDebug(k_debug_category, "%d deferred unlinks of the parent process left to it",
                 static_cast<int>(m_pending_unlinks.size()));
      }
      m_pending_unlinks.clear();
      m_pending_pid = self;
    }
  }

  // Record what a Stat of the object `real` answered. Caller holds m_mutex.
  void note_object_look(const std::string& real, bool missing) {
    if (!missing) {
      m_missing_looks.erase(real);
      return;
    }
    const auto now = std::chrono::steady_clock::now();
    if (m_missing_looks.size() >= m_missing_looks_prune_at) {
      // A process that looks at many objects: expired entries go, and the next pass waits for
      // the map to double, so a burst of looks costs amortised constant time each.
      for (auto it = m_missing_looks.begin(); it != m_missing_looks.end();) {
        it = now - it->second.when > k_missing_look_lifetime ? m_missing_looks.erase(it)
                                                             : std::next(it);
      }
      m_missing_looks_prune_at = std::max<size_t>(64, 2 * m_missing_looks.size());
    }
    m_missing_looks[real] = MissingLook{now, m_changes};
  }

  // Takes out the entry of `real` and tells whether it still stands: recent, and nothing this
  // process did has changed files since. Caller holds m_mutex.
  bool take_missing_look(const std::string& real) {
    const auto it = m_missing_looks.find(real);
    if (it == m_missing_looks.end()) {
      return false;
    }
    const MissingLook look = it->second;
    m_missing_looks.erase(it);
    return look.changes == m_changes &&
           std::chrono::steady_clock::now() - look.when <= k_missing_look_lifetime;
  }

  // The live (not discarded) in-flight entry for `real`, or nullptr. Caller holds m_mutex.
  std::shared_ptr<InFlight> live_entry(const std::string& real) {
    auto it = m_in_flight.find(real);
    if (it == m_in_flight.end() || it->second->discard) {
      return nullptr;
    }
    return it->second;
  }

  // Where a flush runs: GDAL's file manager may be gone at its cleanup, and a thread without
  // network state of its own is needed at exit (see flush_at_exit); without one, only local
  // files can be deleted there.
  enum class FlushPoint { k_running, k_exit, k_exit_local_only, k_gdal_cleanup };

  // Carry out every pending unlink that no IDEM call holds: only when the file is still the one
  // the unlink saw, hook first (ledger rows), then the file. Each path is taken out of the set
  // before it is handled, so every unlink runs at most once.
  void flush(FlushPoint point) {
    std::map<std::string, PendingUnlink> paths;
    UnlinkHook hook;
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      own_pending_unlinks();
      for (auto it = m_pending_unlinks.begin(); it != m_pending_unlinks.end();) {
        if (it->second.adoption != 0) {
          ++it;  // an IDEM call in progress resolves it
        } else {
          paths.insert(*it);
          it = m_pending_unlinks.erase(it);
        }
      }
      hook = m_hook;
    }
    for (const auto& [path, pending] : paths) {
      if (!local_path(path) && point == FlushPoint::k_gdal_cleanup) {
        // GDAL's file manager is being torn down: no VSI call is safe any more.
        CPLError(CE_Warning, CPLE_FileIO,
                 "gdal-idem: deferred delete of %s skipped at GDAL cleanup", path.c_str());
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
      const std::optional<FileIdentity> now = current_identity(path);
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
      const int result = local_path(path) ? ::unlink(path.c_str()) : VSIUnlink(path.c_str());
      {
        std::lock_guard<std::mutex> lock(m_mutex);
        ++m_changes;
      }
      if (result == 0) {
        CPLDebug(k_debug_category, "carried out the deferred unlink of %s%s", path.c_str(),
                 point == FlushPoint::k_gdal_cleanup ? " (GDAL cleanup)"
                 : point == FlushPoint::k_running    ? ""
                                                     : " (end of the process)");
      } else if (errno != ENOENT) {
        CPLError(CE_Warning, CPLE_FileIO, "gdal-idem: deferred delete of %s failed: %s",
                 path.c_str(), std::strerror(errno));
      }
    }
  }
};

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
    std::lock_guard<std::mutex> lock(shared.m_mutex);
    shared.own_pending_unlinks();
    if (shared.m_pending_unlinks.empty()) {
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

// What is at a path, asked of its file system.
struct FileLook {
  bool exists = false;
  VSIStatBufL info{};
  uint64_t changes = 0;  // m_changes when it was asked
};

// Looks at `real` for a caller holding `lock` on m_mutex, for as long as `needed()` says so
// (checked with the lock held). The look is taken with the lock released: on object storage it
// is a request, which must not hold up this process's other /vsiidem/ calls. It is used only if
// nothing this process did changed files meanwhile, else taken again; after three such tries it
// is taken with the lock held, so that a busy process still gets an answer.
template <class Needed>
std::optional<FileLook> look_at(const std::string& real, std::unique_lock<std::mutex>& lock,
                                Needed needed) {
  auto& shared = state();
  std::optional<FileLook> look;
  for (int tries = 0; needed() && !(look && look->changes == shared.m_changes); ++tries) {
    look.emplace();
    look->changes = shared.m_changes;
    if (tries < 3) {
      lock.unlock();
    }
    look->exists = handler_for(real)->Stat(real.c_str(), &look->info, VSI_STAT_EXISTS_FLAG) == 0;
    if (!lock.owns_lock()) {
      lock.lock();
    }
  }
  return look;
}

/************************************************************************/
/*                          VsiIdemWriteHandle                          */
/************************************************************************/

// A handle writing the temporary file of an in-flight output; the last one to close publishes.
//
// An update open ("r+") of a published file starts in read-through mode on the file itself and
// copies it to a temporary file only at the first write or truncate: GDAL opens outputs in
// update mode without writing (gdalwarp -overwrite checks the existing output that way), and
// such an open must neither republish the file (new mtime) nor pay for a copy.
class VsiIdemWriteHandle final : public VSIVirtualHandle {
 public:
  VsiIdemWriteHandle(VSIVirtualHandle* inner, std::string real, std::shared_ptr<InFlight> entry)
      : m_inner(inner), m_real(std::move(real)), m_entry(std::move(entry)) {}
  // Read-through until the first write (see above).
  VsiIdemWriteHandle(VSIVirtualHandle* read_only_inner, std::string real)
      : m_inner(read_only_inner), m_real(std::move(real)), m_copy_deferred(true) {}
  ~VsiIdemWriteHandle() override { Close(); }
  VsiIdemWriteHandle(const VsiIdemWriteHandle&) = delete;
  VsiIdemWriteHandle& operator=(const VsiIdemWriteHandle&) = delete;

  int Seek(vsi_l_offset offset, int whence) override { return m_inner->Seek(offset, whence); }
  vsi_l_offset Tell() override { return m_inner->Tell(); }
  size_t Read(IDEM_VSI_RW_PARAMETERS(void*, buffer)) override {
    return m_inner->Read(IDEM_VSI_RW_ARGUMENTS(buffer));
  }
  int ReadMultiRange(int ranges, void** data, const vsi_l_offset* offsets,
                     const size_t* sizes) override {
    return m_inner->ReadMultiRange(ranges, data, offsets, sizes);
  }
  size_t Write(IDEM_VSI_RW_PARAMETERS(const void*, buffer)) override {
    if (m_copy_deferred && !start_copy()) {
      return 0;
    }
    return m_inner->Write(IDEM_VSI_RW_ARGUMENTS(buffer));
  }
  int Eof() override { return m_inner->Eof(); }
  int Flush() override { return m_copy_deferred ? 0 : m_inner->Flush(); }
  int Truncate(vsi_l_offset new_size) override {
    if (m_copy_deferred && !start_copy()) {
      return -1;
    }
    return m_inner->Truncate(new_size);
  }
  void* GetNativeFileDescriptor() override { return m_inner->GetNativeFileDescriptor(); }
  VSIRangeStatus GetRangeStatus(vsi_l_offset offset, vsi_l_offset length) override {
    return m_inner->GetRangeStatus(offset, length);
  }
  bool HasPRead() const override { return m_inner->HasPRead(); }
  size_t PRead(void* buffer, size_t size, vsi_l_offset offset) const override {
    return m_inner->PRead(buffer, size, offset);
  }
#if IDEM_GDAL_HAS_VSI_ADVISE_READ
  void AdviseRead(int ranges, const vsi_l_offset* offsets, const size_t* sizes) override {
    m_inner->AdviseRead(ranges, offsets, sizes);
  }
#endif
#if IDEM_GDAL_HAS_VSI_ERROR
  int Error() override {
    return m_inner->Error();
  }
  void ClearErr() override {
    m_inner->ClearErr();
  }
#endif
#if IDEM_GDAL_HAS_VSI_CANCEL_CREATION
  // A driver whose write failed asks for the file not to be created: it is never published.
  void CancelCreation() override;
#endif

  int Close() override;

 private:
  bool start_copy();
  void end_publishing(VsiIdemState& shared, bool published, uint64_t unlink_before);

  VSIVirtualHandle* m_inner;
  std::string m_real;
  std::shared_ptr<InFlight> m_entry;
  bool m_copy_deferred = false;
  bool m_closed = false;
};

int VsiIdemWriteHandle::Close() {
  if (m_closed) {
    return 0;
  }
  m_closed = true;
  int result = m_inner->Close();
  delete m_inner;
  m_inner = nullptr;
  if (m_copy_deferred) {
    return result;  // never written: the published file is untouched
  }
  try {
    auto& shared = state();
    bool last = false;
    bool discard = false;
    {
      std::lock_guard<std::mutex> lock(shared.m_mutex);
      last = --m_entry->writers == 0;
      discard = m_entry->discard;
    }
    if (!last) {
      return result;
    }
    const bool durable = durable_writes();
    if (!discard && result == 0 && durable && !m_entry->output->is_object()) {
      // The slow part, outside the lock; commit() re-syncs, which is then cheap.
      fsync_path(m_entry->output->temp_path());
    }
    std::unique_lock<std::mutex> lock(shared.m_mutex);
    if (m_entry->writers > 0) {
      return result;  // reopened meanwhile: the new last writer publishes
    }
    auto it = shared.m_in_flight.find(m_real);
    if (it != shared.m_in_flight.end() && it->second == m_entry) {
      shared.m_in_flight.erase(it);
    }
    if (m_entry->discard) {
      CPLDebug(k_debug_category, "discarded %s (unlinked while open)", m_real.c_str());
      m_entry->output.reset();
      return result;
    }
    if (result != 0) {
      CPLError(CE_Failure, CPLE_FileIO,
               "/vsiidem/: closing the temporary file of %s failed; it was not published",
               m_real.c_str());
      m_entry->output.reset();
      return result;
    }
    // Publish without the lock. Meanwhile the path shows what it showed before this close
    // (the previous file, or nothing while an unlink is pending), and a rename of it is refused.
    const auto pending = shared.m_pending_unlinks.find(m_real);
    const uint64_t unlink_before =
        pending == shared.m_pending_unlinks.end() ? 0 : pending->second.number;
    ++shared.m_publishing[m_real];
    lock.unlock();
    try {
      test_pause("vsiidem_publish");
      m_entry->output->commit(durable);
    } catch (...) {
      lock.lock();
      end_publishing(shared, false, unlink_before);
      throw;
    }
    m_entry->output.reset();
    lock.lock();
    end_publishing(shared, true, unlink_before);
    CPLDebug(k_debug_category, "published %s", m_real.c_str());
  } catch (const std::exception& error) {
    CPLError(CE_Failure, CPLE_FileIO, "/vsiidem/: %s", error.what());
    return -1;
  }
  return result;
}

#if IDEM_GDAL_HAS_VSI_CANCEL_CREATION
void VsiIdemWriteHandle::CancelCreation() {
  if (m_copy_deferred || !m_entry) {
    return;  // nothing written yet: the file in place stays as it is
  }
  auto& shared = state();
  std::lock_guard<std::mutex> lock(shared.m_mutex);
  m_entry->discard = true;  // the last close removes the temporary file and publishes nothing
}
#endif

// After publishing (caller holds m_mutex): a file renamed into place replaces what an unlink made
// before the close was going to remove; an unlink made while publishing still happens.
void VsiIdemWriteHandle::end_publishing(VsiIdemState& shared, bool published,
                                        uint64_t unlink_before) {
  ++shared.m_changes;
  auto publishing = shared.m_publishing.find(m_real);
  if (publishing != shared.m_publishing.end() && --publishing->second == 0) {
    shared.m_publishing.erase(publishing);
  }
  const auto pending = shared.m_pending_unlinks.find(m_real);
  if (published && pending != shared.m_pending_unlinks.end()) {
    if (pending->second.number == unlink_before) {
      shared.m_pending_unlinks.erase(pending);
    } else if (!pending->second.observed) {
      // Unlinked while this close published: what it removes is the file just published.
      pending->second.observed = current_identity(m_real);
    }
  }
}

// First write of an update open: continue on a temporary copy (shared with any handle already
// writing that path), at the same offset.
bool VsiIdemWriteHandle::start_copy() {
  try {
    const vsi_l_offset offset = m_inner->Tell();
    auto& shared = state();
    std::shared_ptr<InFlight> entry;
    {
      std::lock_guard<std::mutex> lock(shared.m_mutex);
      entry = shared.live_entry(m_real);
      if (!entry) {
        entry = std::make_shared<InFlight>();
        entry->output = std::make_unique<AtomicOutput>(m_real, random_token());
        copy_published(m_real, entry->output->temp_path());
        shared.m_in_flight[m_real] = entry;
        CPLDebug(k_debug_category, "writing %s through %s", m_real.c_str(),
                 entry->output->temp_path().c_str());
      }
      ++entry->writers;
    }
    const std::string& temp = entry->output->temp_path();
    VSIVirtualHandle* copy =
        compat::open_handle(handler_for(temp), temp.c_str(), "r+b", TRUE, nullptr);
    if (copy == nullptr || copy->Seek(offset, SEEK_SET) != 0) {
      delete copy;
      std::lock_guard<std::mutex> lock(shared.m_mutex);
      --entry->writers;
      errno = EIO;
      return false;
    }
    m_inner->Close();
    delete m_inner;
    m_inner = copy;
    m_entry = std::move(entry);
    m_copy_deferred = false;
    return true;
  } catch (const std::exception& error) {
    CPLError(CE_Failure, CPLE_FileIO, "/vsiidem/: %s", error.what());
    errno = EIO;
    return false;
  }
}

/************************************************************************/
/*                       VsiIdemFilesystemHandler                       */
/************************************************************************/

class VsiIdemFilesystemHandler final : public VSIFilesystemHandler {
 public:
  VsiIdemFilesystemHandler() = default;
  ~VsiIdemFilesystemHandler() override;
  VsiIdemFilesystemHandler(const VsiIdemFilesystemHandler&) = delete;
  VsiIdemFilesystemHandler& operator=(const VsiIdemFilesystemHandler&) = delete;

  using VSIFilesystemHandler::Open;
  compat::VsiOpenResult Open(const char* filename, const char* access, bool set_error,
                             CSLConstList options) override {
    return compat::to_open_result(open_handle(filename, access, set_error, options));
  }
#if IDEM_GDAL_HAS_VSI_CANCEL_CREATION
  // Every file written through /vsiidem/ becomes visible only when its last handle closes.
  compat::VsiOpenResult CreateOnlyVisibleAtCloseTime(const char* filename,
                                                     bool /*emulation_allowed*/,
                                                     CSLConstList options) override {
    return compat::to_open_result(open_handle(filename, "wb+", true, options));
  }
#endif
  int Stat(const char* filename, VSIStatBufL* stat_buf, int flags) override;
  int Unlink(const char* filename) override;
  int Mkdir(const char* dirname, long mode) override;
  int Rmdir(const char* dirname) override;
#if IDEM_GDAL_VSI_READDIR_IS_PURE
  char** ReadDir(const char* dirname) override {
    return ReadDirEx(dirname, 0);
  }
#endif
  char** ReadDirEx(const char* dirname, int max_files) override;
  int Rename(const char* old_path, const char* new_path IDEM_VSI_RENAME_EXTRA_PARAMETERS) override;
  int IsCaseSensitive(const char* filename) override;
  GIntBig GetDiskFreeSpace(const char* dirname) override;
  int SupportsSparseFiles(const char* path) override;
  char** GetFileMetadata(const char* filename, const char* domain, CSLConstList options) override;
  bool SetFileMetadata(const char* filename, CSLConstList metadata, const char* domain,
                       CSLConstList options) override;
  bool IsLocal(const char* path) IDEM_VSI_IS_LOCAL_CONST override;
  bool SupportsSequentialWrite(const char* path, bool allow_local_temp_file) override;
  bool SupportsRandomWrite(const char* path, bool allow_local_temp_file) override;

 private:
  VSIVirtualHandle* open_handle(const char* filename, const char* access, bool set_error,
                                CSLConstList options);
  VSIVirtualHandle* open_for_write(const std::string& real, const char* access, bool set_error,
                                   CSLConstList options);
};

// Resolves the deferred unlinks an IDEM call adopted (vsiidem_resolve_pre_delete).
std::vector<std::string> resolve_adopted(uint64_t adoption, bool published,
                                         const std::vector<std::string>& files) {
  std::set<std::string> kept;
  for (const std::string& file : files) {
    kept.insert(vsiidem_absolute_path(file));
  }
  auto& shared = state();
  std::vector<std::pair<std::string, PendingUnlink>> adopted;
  {
    std::lock_guard<std::mutex> lock(shared.m_mutex);
    adopted = shared.take_adopted(adoption);
  }
  std::vector<std::string> failed;
  if (!published) {
    for (const auto& entry : adopted) {
      CPLDebug(k_debug_category, "deferred unlink of %s dropped: the IDEM call kept the file",
               entry.first.c_str());
    }
    return failed;
  }
  for (const auto& [path, pending] : adopted) {
    if (kept.count(path) != 0) {
      continue;  // replaced by the new output's file of that name
    }
    if (!still_observed(path, pending)) {
      CPLDebug(k_debug_category, "%s is not the file the pre-delete saw: left in place",
               path.c_str());
      continue;
    }
    const int result = local_path(path) ? ::unlink(path.c_str()) : VSIUnlink(path.c_str());
    {
      std::lock_guard<std::mutex> lock(shared.m_mutex);
      ++shared.m_changes;
    }
    if (result != 0 && errno != ENOENT) {
      failed.push_back(path);
    } else {
      CPLDebug(k_debug_category, "removed %s, a file of the replaced output", path.c_str());
    }
  }
  return failed;
}

// Runs when GDAL tears its file manager down (GDALDestroyDriverManager, at the end of gdalwarp
// and gdal_translate): the last moment this process can carry out its deferred unlinks.
VsiIdemFilesystemHandler::~VsiIdemFilesystemHandler() {
  try {
    state().flush(VsiIdemState::FlushPoint::k_gdal_cleanup);
  } catch (...) {
    // Never let anything escape into GDAL's cleanup.
  }
}

VSIVirtualHandle* VsiIdemFilesystemHandler::open_handle(const char* filename, const char* access,
                                                        bool set_error, CSLConstList options) {
  try {
    note_use();
    const std::string real = real_absolute(filename);
    if (is_write_access(access)) {
      return open_for_write(real, access, set_error, options);
    }
    std::string target = real;
    bool looked_missing = false;
    {
      auto& shared = state();
      std::lock_guard<std::mutex> lock(shared.m_mutex);
      if (auto entry = shared.live_entry(real)) {
        target = entry->output->temp_path();  // drivers read back their own output
      } else if (shared.m_pending_unlinks.count(real) != 0 || shared.m_in_flight.count(real)) {
        errno = ENOENT;
        if (set_error) {
          VSIError(VSIE_FileError, "%s: No such file or directory", filename);
        }
        return nullptr;
      } else if (is_object_store_path(real)) {
        looked_missing = shared.take_missing_look(real);
      }
    }
    if (looked_missing && !cached_as_existing(real)) {
      // An object a Stat found missing moments ago is not asked for again, unless this process
      // wrote it since. gdalwarp looks at its output, then GDAL's CreateCopy probes it with an
      // open, which on object storage lists the output's directory: a request per tile whose
      // answer the IDEM driver does not use (its ledger decides). docs/vsiidem.md has the rules.
      CPLDebug(k_debug_category,
               "%s: missing, as a Stat %lld s or less ago found (open answered without a "
               "request)",
               real.c_str(), static_cast<long long>(k_missing_look_lifetime.count()));
      errno = ENOENT;
      if (set_error) {
        VSIError(VSIE_FileError, "%s: No such file or directory", filename);
      }
      return nullptr;
    }
    return compat::open_handle(handler_for(target), target.c_str(), access, set_error, options);
  } catch (const std::exception& error) {
    CPLError(CE_Failure, CPLE_FileIO, "/vsiidem/: %s", error.what());
    errno = EIO;
    return nullptr;
  }
}

VSIVirtualHandle* VsiIdemFilesystemHandler::open_for_write(const std::string& real,
                                                           const char* access, bool set_error,
                                                           CSLConstList options) {
  if (!publishable(real)) {
    CPLError(CE_Failure, CPLE_NotSupported,
             "/vsiidem/: writing to %s is not supported; only local paths and object storage "
             "(/vsis3/, /vsigs/, /vsiaz/, ...) can be published atomically",
             real.c_str());
    errno = EROFS;
    return nullptr;
  }
  auto& shared = state();
  // Held while the temporary file is set up, so two opens of one path share one entry; released
  // only to look at what is at the path (look_at), after which everything is looked at again.
  std::unique_lock<std::mutex> lock(shared.m_mutex);
  const std::optional<FileLook> look = look_at(real, lock, [&] {
    return shared.m_in_flight.count(real) == 0 && shared.m_pending_unlinks.count(real) == 0;
  });
  auto it = shared.m_in_flight.find(real);
  std::shared_ptr<InFlight> entry = it == shared.m_in_flight.end() ? nullptr : it->second;
  if (entry && entry->discard && !truncates(access)) {
    errno = ENOENT;  // unlinked while open: r+ sees no file, a starts a new one below
    if (std::strchr(access, 'a') == nullptr) {
      if (set_error) {
        VSIError(VSIE_FileError, "%s: No such file or directory", real.c_str());
      }
      return nullptr;
    }
  }
  if (entry) {
    const std::string& temp = entry->output->temp_path();
    if (entry->discard) {
      // Unlinked while open, now written again: a new, empty file.
      if (::truncate(temp.c_str(), 0) != 0) {
        errno = EIO;
        return nullptr;
      }
      entry->discard = false;
    }
    VSIVirtualHandle* inner =
        compat::open_handle(handler_for(temp), temp.c_str(), access, set_error, options);
    if (inner == nullptr) {
      return nullptr;
    }
    ++entry->writers;
    return new VsiIdemWriteHandle(inner, real, entry);
  }

  const bool pending = shared.m_pending_unlinks.count(real) != 0;
  const VSIStatBufL existing = look ? look->info : VSIStatBufL{};
  const bool exists = !pending && look->exists;
  if (exists && VSI_ISDIR(existing.st_mode)) {
    errno = EISDIR;
    if (set_error) {
      VSIError(VSIE_FileError, "%s: Is a directory", real.c_str());
    }
    return nullptr;
  }
  const bool appends = std::strchr(access, 'a') != nullptr;
  if (!truncates(access) && !appends && !exists) {
    errno = ENOENT;  // "r+" needs an existing file
    if (set_error) {
      VSIError(VSIE_FileError, "%s: No such file or directory", real.c_str());
    }
    return nullptr;
  }

  if (exists && !truncates(access) && !appends) {
    // Update of a published file: read through it until the first write.
    VSIVirtualHandle* inner =
        compat::open_handle(handler_for(real), real.c_str(), "rb", set_error, options);
    if (inner == nullptr) {
      return nullptr;
    }
    return new VsiIdemWriteHandle(inner, real);
  }
  auto fresh = std::make_shared<InFlight>();
  fresh->output = std::make_unique<AtomicOutput>(real, random_token());
  const std::string& temp = fresh->output->temp_path();
  if (exists && !truncates(access)) {
    // Append: work on a copy, published when closed (never the file in place).
    copy_published(real, temp);
  }
  VSIVirtualHandle* inner =
      compat::open_handle(handler_for(temp), temp.c_str(), access, set_error, options);
  if (inner == nullptr) {
    return nullptr;  // `fresh` removes its temporary directory
  }
  if (exists && local_path(real)) {
    ::chmod(temp.c_str(), existing.st_mode & 07777);  // a rewrite keeps the file's permissions
  }
  fresh->writers = 1;
  shared.m_in_flight[real] = fresh;
  CPLDebug(k_debug_category, "writing %s through %s", real.c_str(), temp.c_str());
  return new VsiIdemWriteHandle(inner, real, fresh);
}

int VsiIdemFilesystemHandler::Stat(const char* filename, VSIStatBufL* stat_buf, int flags) {
  try {
    note_use();
    const std::string real = real_absolute(filename);
    std::string target = real;
    {
      auto& shared = state();
      std::lock_guard<std::mutex> lock(shared.m_mutex);
      if (auto entry = shared.live_entry(real)) {
        target = entry->output->temp_path();
      } else if (shared.m_pending_unlinks.count(real) != 0 || shared.m_in_flight.count(real)) {
        errno = ENOENT;
        if ((flags & VSI_STAT_SET_ERROR_FLAG) != 0) {
          VSIError(VSIE_FileError, "%s: No such file or directory", filename);
        }
        return -1;
      }
    }
    errno = 0;
    const int result = handler_for(target)->Stat(target.c_str(), stat_buf, flags);
    const int stat_errno = errno;
    if (target == real && is_object_store_path(real) && (flags & VSI_STAT_CACHE_ONLY) == 0) {
      // GDAL reports a missing object with errno 0 (or ENOENT), a failed request with the
      // request's errno: only the former is a look that found it missing.
      auto& shared = state();
      std::lock_guard<std::mutex> lock(shared.m_mutex);
      shared.note_object_look(real, result != 0 && (stat_errno == 0 || stat_errno == ENOENT));
    }
    errno = stat_errno;
    return result;
  } catch (const std::exception& error) {
    CPLError(CE_Failure, CPLE_FileIO, "/vsiidem/: %s", error.what());
    errno = EIO;
    return -1;
  }
}

// Deferred: recorded and hidden now, carried out at the end of the process unless cancelled
// (an IDEM skip keeps the file; a new file renamed into place replaces it).
int VsiIdemFilesystemHandler::Unlink(const char* filename) {
  try {
    const std::string real = real_absolute(filename);
    // An object's identity (its ETag) is asked of the store before the lock is taken.
    const std::optional<FileIdentity> object_seen =
        is_object_store_path(real) ? current_identity(real) : std::nullopt;
    auto& shared = state();
    std::unique_lock<std::mutex> lock(shared.m_mutex);
    const std::optional<FileLook> look = look_at(real, lock, [&] {
      return shared.m_publishing.count(real) == 0 && shared.m_pending_unlinks.count(real) == 0;
    });
    bool existed = false;
    if (auto entry = shared.live_entry(real)) {
      entry->discard = true;  // never published; an older file there is still deleted below
      existed = true;
    }
    if (shared.m_publishing.count(real) != 0) {
      // A close is putting a new file there: this unlink comes after it and removes it (the
      // file is looked at when the unlink is carried out, once the close has published).
      shared.defer_unlink(real, std::nullopt);
      existed = true;
    } else if (shared.m_pending_unlinks.count(real) == 0 && look->exists) {
      if (VSI_ISDIR(look->info.st_mode)) {
        errno = EISDIR;
        return -1;
      }
      shared.defer_unlink(real, local_path(real)
                                    ? std::optional<FileIdentity>(local_identity(look->info))
                                    : object_seen);
      existed = true;
    }
    if (!existed) {
      errno = ENOENT;
      return -1;
    }
    return 0;
  } catch (const std::exception& error) {
    CPLError(CE_Failure, CPLE_FileIO, "/vsiidem/: %s", error.what());
    errno = EIO;
    return -1;
  }
}

int VsiIdemFilesystemHandler::Mkdir(const char* dirname, long mode) {
  try {
    return VSIMkdir(real_absolute(dirname).c_str(), mode);
  } catch (const std::exception& error) {
    CPLError(CE_Failure, CPLE_FileIO, "/vsiidem/: %s", error.what());
    errno = EIO;
    return -1;
  }
}

int VsiIdemFilesystemHandler::Rmdir(const char* dirname) {
  try {
    return VSIRmdir(real_absolute(dirname).c_str());
  } catch (const std::exception& error) {
    CPLError(CE_Failure, CPLE_FileIO, "/vsiidem/: %s", error.what());
    errno = EIO;
    return -1;
  }
}

// The directory as this process sees it: pending unlinks hidden, files being written shown,
// IDEM's own temporary directories hidden.
char** VsiIdemFilesystemHandler::ReadDirEx(const char* dirname, int max_files) {
  try {
    const std::string real_dir = real_absolute(dirname);
    CPLStringList listed(VSIReadDirEx(real_dir.c_str(), max_files));
    const bool dir_exists = listed.List() != nullptr;
    const std::string prefix = real_dir == "/" ? "/" : real_dir + "/";
    auto& shared = state();
    std::lock_guard<std::mutex> lock(shared.m_mutex);
    CPLStringList visible;
    std::set<std::string> seen;
    for (int i = 0; i < listed.size(); ++i) {
      const std::string name = listed[i];
      if (name.rfind(k_temp_prefix, 0) == 0) {
        continue;
      }
      const std::string full = prefix + name;
      if (shared.m_pending_unlinks.count(full) != 0 && !shared.live_entry(full)) {
        continue;
      }
      auto in_flight = shared.m_in_flight.find(full);
      if (in_flight != shared.m_in_flight.end() && in_flight->second->discard) {
        continue;
      }
      seen.insert(name);
      visible.AddString(name.c_str());
    }
    for (const auto& [path, entry] : shared.m_in_flight) {
      if (entry->discard || path.rfind(prefix, 0) != 0) {
        continue;
      }
      const std::string name = path.substr(prefix.size());
      if (name.find('/') == std::string::npos && seen.count(name) == 0) {
        visible.AddString(name.c_str());
      }
    }
    if (!dir_exists && visible.empty()) {
      return nullptr;
    }
    return visible.StealList();
  } catch (const std::exception& error) {
    CPLError(CE_Failure, CPLE_FileIO, "/vsiidem/: %s", error.what());
    return nullptr;
  }
}

int VsiIdemFilesystemHandler::Rename(const char* old_path,
                                     const char* new_path IDEM_VSI_RENAME_EXTRA_PARAMETERS) {
  try {
    const std::string real_old = real_absolute(old_path);
    const std::string real_new = real_absolute(new_path);
    auto& shared = state();
    std::lock_guard<std::mutex> lock(shared.m_mutex);
    if (shared.m_in_flight.count(real_old) != 0 || shared.m_publishing.count(real_old) != 0) {
      errno = EBUSY;  // still being written or published: rename it once that is done
      return -1;
    }
    if (shared.m_pending_unlinks.count(real_old) != 0) {
      errno = ENOENT;
      return -1;
    }
    const int result = VSIRename(real_old.c_str(), real_new.c_str());
    ++shared.m_changes;
    if (result == 0) {
      shared.m_pending_unlinks.erase(real_new);
    }
    return result;
  } catch (const std::exception& error) {
    CPLError(CE_Failure, CPLE_FileIO, "/vsiidem/: %s", error.what());
    errno = EIO;
    return -1;
  }
}

int VsiIdemFilesystemHandler::IsCaseSensitive(const char* filename) {
  const std::string real = strip_prefix(filename);
  return handler_for(real)->IsCaseSensitive(real.c_str());
}

GIntBig VsiIdemFilesystemHandler::GetDiskFreeSpace(const char* dirname) {
  const std::string real = strip_prefix(dirname);
  return handler_for(real)->GetDiskFreeSpace(real.c_str());
}

int VsiIdemFilesystemHandler::SupportsSparseFiles(const char* path) {
  const std::string real = strip_prefix(path);
  return handler_for(real)->SupportsSparseFiles(real.c_str());
}

bool VsiIdemFilesystemHandler::IsLocal(const char* path) IDEM_VSI_IS_LOCAL_CONST {
  const std::string real = strip_prefix(path);
  return handler_for(real)->IsLocal(real.c_str());
}

bool VsiIdemFilesystemHandler::SupportsSequentialWrite(const char* path,
                                                       bool allow_local_temp_file) {
  const std::string real = strip_prefix(path);
  // Objects are written to a local temporary file and uploaded when closed.
  return is_object_store_path(real) ||
         (local_path(real) &&
          handler_for(real)->SupportsSequentialWrite(real.c_str(), allow_local_temp_file));
}

bool VsiIdemFilesystemHandler::SupportsRandomWrite(const char* path, bool allow_local_temp_file) {
  const std::string real = strip_prefix(path);
  return is_object_store_path(real) ||
         (local_path(real) &&
          handler_for(real)->SupportsRandomWrite(real.c_str(), allow_local_temp_file));
}

char** VsiIdemFilesystemHandler::GetFileMetadata(const char* filename, const char* domain,
                                                 CSLConstList options) {
  try {
    if (domain != nullptr && EQUAL(domain, k_domain_handler)) {
      CPLStringList result;
      result.SetNameValue("VERSION", "1");
      result.SetNameValue("PID", std::to_string(::getpid()).c_str());
      return result.StealList();
    }
    const std::string real = real_absolute(filename);
    if (domain != nullptr && EQUAL(domain, k_domain_unlink_pending)) {
      CPLStringList result;
      result.SetNameValue("PENDING", vsiidem_unlink_pending(real) ? "YES" : "NO");
      return result.StealList();
    }
    return VSIGetFileMetadata(real.c_str(), domain, options);
  } catch (const std::exception& error) {
    CPLError(CE_Failure, CPLE_FileIO, "/vsiidem/: %s", error.what());
    return nullptr;
  }
}

bool VsiIdemFilesystemHandler::SetFileMetadata(const char* filename, CSLConstList metadata,
                                               const char* domain, CSLConstList options) {
  try {
    if (domain != nullptr && EQUAL(domain, k_domain_flush_unlinks)) {
      vsiidem_flush_unlinks();
      return true;
    }
    const std::string real = real_absolute(filename);
    if (domain != nullptr && EQUAL(domain, k_domain_cancel_unlink)) {
      vsiidem_cancel_unlink(real);
      return true;
    }
    return VSISetFileMetadata(real.c_str(), metadata, domain, options) != 0;
  } catch (const std::exception& error) {
    CPLError(CE_Failure, CPLE_FileIO, "/vsiidem/: %s", error.what());
    return false;
  }
}

std::mutex& install_mutex() {
  static auto* instance = new std::mutex();
  return *instance;
}

}  // namespace

void install_vsiidem_handler() {
  std::lock_guard<std::mutex> lock(install_mutex());
  VSIFilesystemHandler* current = VSIFileManager::GetHandler(k_vsiidem_prefix);
  VSIFilesystemHandler* local = VSIFileManager::GetHandler("/");
  if (current != local) {
    if (dynamic_cast<VsiIdemFilesystemHandler*>(current) == nullptr) {
      // Another copy of this code (a program that links the driver and loads the plugin too)
      // would keep deferred unlinks this copy cannot see.
      CPLError(CE_Failure, CPLE_AppDefined,
               "/vsiidem/ is already installed by another copy of gdal-idem in this process; "
               "load gdal_IDEM.so only through GDAL's plugin path");
    }
    return;
  }
  // GDAL's file manager owns the handler from here on (the analyzer does not see it kept).
  // NOLINTBEGIN(clang-analyzer-cplusplus.NewDeleteLeaks)
  compat::install_handler(k_vsiidem_prefix, new VsiIdemFilesystemHandler());
  CPLDebug(k_debug_category, "installed the /vsiidem/ handler");
  // NOLINTEND(clang-analyzer-cplusplus.NewDeleteLeaks)
}

bool vsiidem_unlink_pending(const std::string& real_path) {
  auto& shared = state();
  const std::string real = vsiidem_absolute_path(real_path);
  std::lock_guard<std::mutex> lock(shared.m_mutex);
  return shared.m_pending_unlinks.count(real) != 0;
}

void vsiidem_cancel_unlink(const std::string& real_path) {
  auto& shared = state();
  const std::string real = vsiidem_absolute_path(real_path);
  std::lock_guard<std::mutex> lock(shared.m_mutex);
  if (shared.m_pending_unlinks.erase(real) != 0) {
    CPLDebug(k_debug_category, "deferred unlink of %s cancelled", real.c_str());
  }
}

uint64_t vsiidem_adopt_pre_delete(const std::string& destination) {
  auto& shared = state();
  const std::string real = vsiidem_absolute_path(destination);
  std::lock_guard<std::mutex> lock(shared.m_mutex);
  return shared.adopt(real);
}

std::vector<std::string> vsiidem_resolve_pre_delete(uint64_t adoption, bool published,
                                                    const std::vector<std::string>& files) {
  if (adoption == 0) {
    return {};
  }
  return resolve_adopted(adoption, published, files);
}

void vsiidem_set_unlink_hook(UnlinkHook hook) {
  auto& shared = state();
  std::lock_guard<std::mutex> lock(shared.m_mutex);
  shared.m_hook = std::move(hook);
}

void vsiidem_set_use_hook(void (*hook)()) {
  g_use_hook = hook;
}

void vsiidem_flush_unlinks() {
  state().flush(VsiIdemState::FlushPoint::k_running);
}

}  // namespace idem
