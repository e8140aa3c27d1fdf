// SPDX-License-Identifier: MIT
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
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "base/gdal_compat.hpp"
#include "base/paths.hpp"
#include "base/random_token.hpp"
#include "cpl_conv.h"
#include "cpl_error.h"
#include "cpl_string.h"
#include "cpl_vsi.h"
#include "cpl_vsi_error.h"
#include "cpl_vsi_virtual.h"
#include "gdal_version.h"
#include "store/object_store.hpp"
#include "vsiidem_state.hpp"
#include "vsiidem_write.hpp"
#include "work/atomic_output.hpp"
#include "work/destination_guard.hpp"
#include "work/lease.hpp"

namespace idem {

using namespace vsiidem_detail;  // the handler is built of these parts

namespace {

// Runs `body`, the work of one of the handler's overrides, behind GDAL's C interface, which no
// C++ exception may cross: an exception becomes GDAL's error "/vsiidem/: <what>", errno EIO,
// and the override's `failed` value.
template <typename Failed, typename Body>
auto guarded(Failed failed, Body&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const std::exception& error) {
    CPLError(CE_Failure, CPLE_FileIO, "/vsiidem/: %s", error.what());
    errno = EIO;
    return failed;
  }
}

// The documented domains of the handler's Get/SetFileMetadata (docs/vsiidem.md).
constexpr const char* k_domain_handler = "IDEM_HANDLER";                // get: VERSION=1
constexpr const char* k_domain_unlink_pending = "IDEM_UNLINK_PENDING";  // get: PENDING=YES|NO
constexpr const char* k_domain_cancel_unlink = "IDEM_CANCEL_UNLINK";    // set
constexpr const char* k_domain_flush_unlinks = "IDEM_FLUSH_UNLINKS";    // set

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
  static VSIVirtualHandle* reopen_in_flight(const std::shared_ptr<InFlight>& entry,
                                            const std::string& real, const char* access,
                                            bool set_error, CSLConstList options);
  static VSIVirtualHandle* update_in_place(const std::string& real, bool set_error,
                                           CSLConstList options);
  static VSIVirtualHandle* start_new(VsiIdemState::Locked& shared, const std::string& real,
                                     const char* access, const VSIStatBufL* existing,
                                     std::optional<DirectoryHandle> directory, bool set_error,
                                     CSLConstList options);
};

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
  return guarded(nullptr, [&]() -> VSIVirtualHandle* {
    note_use();
    const std::string real = real_absolute(filename);
    if (is_write_access(access)) {
      return open_for_write(real, access, set_error, options);
    }
    std::string target = real;
    bool looked_missing = false;
    if (local_path(real)) {
      // A FIFO, socket or device is never a dataset's file: opening one for reading (GDAL's
      // pre-delete identifies what is at an output) would block or consume it.
      struct stat there {};
      if (::stat(real.c_str(), &there) == 0 && !S_ISREG(there.st_mode) && !S_ISDIR(there.st_mode)) {
        return refuse(nullptr, EPERM, set_error, filename, "not a regular file");
      }
    }
    {
      VsiIdemState::Locked shared = state().lock();
      if (auto entry = shared.live_entry(real)) {
        target = entry->output->temp_path();  // drivers read back their own output
      } else if (shared.unlink_pending(real) || shared.in_flight().count(real) != 0) {
        return refuse(nullptr, ENOENT, set_error, filename, "No such file or directory");
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
      return refuse(nullptr, ENOENT, set_error, filename, "No such file or directory");
    }
    return compat::open_handle(handler_for(target), target.c_str(), access, set_error, options);
  });
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
  std::optional<DirectoryHandle> directory;
  if (!may_write(real, truncates(access), &directory)) {
    // The files GDAL's pre-delete of this dataset asked to remove stay: the write they made
    // room for will not happen (a source of this work among them).
    state().lock().keep_dataset_of_refused(real);
    return nullptr;
  }
  test_pause("vsiidem_create");  // checked (its directory held), nothing made yet
  // Held while the temporary file is set up, so two opens of one path share one entry; released
  // only to look at what is at the path (look_at), after which everything is looked at again.
  VsiIdemState::Locked shared = state().lock();
  const std::optional<FileLook> look = shared.look_at(
      real, [&] { return shared.in_flight().count(real) == 0 && !shared.unlink_pending(real); });
  auto it = shared.in_flight().find(real);
  if (it != shared.in_flight().end()) {
    return reopen_in_flight(it->second, real, access, set_error, options);
  }
  const VSIStatBufL existing = look ? look->info : VSIStatBufL{};
  const bool exists = !shared.unlink_pending(real) && look->exists;
  const bool appends = std::strchr(access, 'a') != nullptr;
  if (exists && VSI_ISDIR(existing.st_mode)) {
    return refuse(nullptr, EISDIR, set_error, real, "Is a directory");
  }
  if (!truncates(access) && !appends && !exists) {
    return refuse(nullptr, ENOENT, set_error, real, "No such file or directory");  // r+
  }
  if (exists && !truncates(access) && !appends) {
    return update_in_place(real, set_error, options);
  }
  return start_new(shared, real, access, exists ? &existing : nullptr, std::move(directory),
                   set_error, options);
}

// Another handle writes `real` already (`entry`): this one writes the same temporary file.
VSIVirtualHandle* VsiIdemFilesystemHandler::reopen_in_flight(const std::shared_ptr<InFlight>& entry,
                                                             const std::string& real,
                                                             const char* access, bool set_error,
                                                             CSLConstList options) {
  const std::string& temp = entry->output->temp_path();
  if (entry->discard) {
    if (!truncates(access) && std::strchr(access, 'a') == nullptr) {
      // Unlinked while open: r+ sees no file.
      return refuse(nullptr, ENOENT, set_error, real, "No such file or directory");
    }
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

// An update ("r+") of a published file: read through it until the first write, which goes on in
// a copy (VsiIdemWriteHandle::start_copy).
VSIVirtualHandle* VsiIdemFilesystemHandler::update_in_place(const std::string& real, bool set_error,
                                                            CSLConstList options) {
  VSIVirtualHandle* inner =
      compat::open_handle(handler_for(real), real.c_str(), "rb", set_error, options);
  if (inner == nullptr) {
    return nullptr;
  }
  return new VsiIdemWriteHandle(inner, real);
}

// A new temporary file in `directory` (the handle the destination guard looked through): empty,
// or a copy of the file there for an append; published when its last handle closes. `existing`:
// what is at the path (nullptr for nothing).
VSIVirtualHandle* VsiIdemFilesystemHandler::start_new(VsiIdemState::Locked& shared,
                                                      const std::string& real, const char* access,
                                                      const VSIStatBufL* existing,
                                                      std::optional<DirectoryHandle> directory,
                                                      bool set_error, CSLConstList options) {
  auto fresh = std::make_shared<InFlight>();
  fresh->output = std::make_unique<AtomicOutput>(real, random_hex(16), std::move(directory));
  const std::string& temp = fresh->output->temp_path();
  if (existing != nullptr && !truncates(access)) {
    // Append: work on a copy, published when closed (never the file in place).
    copy_published(real, *fresh->output);
  }
  VSIVirtualHandle* inner =
      compat::open_handle(handler_for(temp), temp.c_str(), access, set_error, options);
  if (inner == nullptr) {
    return nullptr;  // `fresh` removes its temporary directory
  }
  if (existing != nullptr && local_path(real)) {
    // A rewrite keeps the file's read and write bits where they are this user's to keep; never
    // set-user-ID and the like (replacing_file_mode).
    fresh->output->set_written_mode(replacing_file_mode(existing->st_mode, existing->st_uid));
  }
  fresh->writers = 1;
  shared.in_flight()[real] = fresh;
  CPLDebug(k_debug_category, "writing %s through %s", real.c_str(), temp.c_str());
  return new VsiIdemWriteHandle(inner, real, fresh);
}

int VsiIdemFilesystemHandler::Stat(const char* filename, VSIStatBufL* stat_buf, int flags) {
  return guarded(-1, [&] {
    note_use();
    const std::string real = real_absolute(filename);
    std::string target = real;
    {
      VsiIdemState::Locked shared = state().lock();
      if (auto entry = shared.live_entry(real)) {
        target = entry->output->temp_path();
      } else if (shared.unlink_pending(real) || shared.in_flight().count(real) != 0) {
        return refuse(-1, ENOENT, (flags & VSI_STAT_SET_ERROR_FLAG) != 0, filename,
                      "No such file or directory");
      }
    }
    errno = 0;
    const int result = handler_for(target)->Stat(target.c_str(), stat_buf, flags);
    const int stat_errno = errno;
    if (target == real && is_object_store_path(real) && (flags & VSI_STAT_CACHE_ONLY) == 0) {
      // GDAL reports a missing object with errno 0 (or ENOENT), a failed request with the
      // request's errno: only the former is a look that found it missing.
      state().lock().note_object_look(real,
                                      result != 0 && (stat_errno == 0 || stat_errno == ENOENT));
    }
    if (result == 0 && target == real) {
      state().lock().note_found(real);
    }
    errno = stat_errno;
    return result;
  });
}

// Deferred: recorded and hidden now, carried out at the end of the process unless cancelled
// (an IDEM skip keeps the file; a new file renamed into place replaces it).
int VsiIdemFilesystemHandler::Unlink(const char* filename) {
  return guarded(-1, [&] {
    const std::string real = real_absolute(filename);
    {
      const std::string refused = state().lock().refused_dataset_of(real);
      if (!refused.empty()) {
        CPLError(CE_Failure, CPLE_NotSupported,
                 "/vsiidem/: %s is a file of the dataset %s, whose write or delete was refused; "
                 "it is kept",
                 real.c_str(), refused.c_str());
        errno = EPERM;
        return -1;
      }
    }
    if (!may_write(real, true)) {
      // What may not be written over may not be deleted either (gdal_translate 3.11+ deletes
      // its output itself before it creates it), nor may the files of its dataset.
      state().lock().keep_dataset_of_refused(real);
      return -1;
    }
    // An object's identity (its ETag) is asked of the store before the lock is taken.
    const std::optional<ObservedFile> object_seen =
        is_object_store_path(real) ? current_identity(real) : std::nullopt;
    VsiIdemState::Locked shared = state().lock();
    const std::optional<FileLook> look = shared.look_at(
        real, [&] { return shared.publishing().count(real) == 0 && !shared.unlink_pending(real); });
    bool existed = false;
    if (auto entry = shared.live_entry(real)) {
      entry->discard = true;  // never published; an older file there is still deleted below
      existed = true;
    }
    if (shared.publishing().count(real) != 0) {
      // A close is putting a new file there: this unlink comes after it and removes it (the
      // file is looked at when the unlink is carried out, once the close has published).
      shared.defer_unlink(real, std::nullopt);
      existed = true;
    } else if (!shared.unlink_pending(real) && look->exists) {
      if (VSI_ISDIR(look->info.st_mode)) {
        errno = EISDIR;
        return -1;
      }
      shared.defer_unlink(real, local_path(real)
                                    ? std::optional<ObservedFile>(local_identity(look->info))
                                    : object_seen);
      existed = true;
    }
    if (!existed && !shared.saw_exist(real)) {
      errno = ENOENT;
      return -1;
    }
    // A file this process saw that another process removed since (two workers preparing one
    // output both delete its old sidecar): what the delete asks for holds, and GDAL would
    // otherwise print "Deleting ... failed" for a run that succeeds.
    return 0;
  });
}

// A directory is made, or removed, relative to the handle of the directory holding it, which the
// destination guard looked through: never at the ledger's names, never through another user's
// link.
int VsiIdemFilesystemHandler::Mkdir(const char* dirname, long mode) {
  return guarded(-1, [&] {
    const std::string real = real_absolute(dirname);
    std::optional<DirectoryHandle> directory;
    if (!may_write(real, false, &directory)) {
      return -1;
    }
    if (!local_path(real)) {
      return VSIMkdir(real.c_str(), mode);
    }
    if (!directory) {
      return -1;  // errno from the open: the parent is missing
    }
    return ::mkdirat(directory->fd(), basename_of(real).c_str(), static_cast<mode_t>(mode));
  });
}

int VsiIdemFilesystemHandler::Rmdir(const char* dirname) {
  return guarded(-1, [&] {
    const std::string real = real_absolute(dirname);
    std::optional<DirectoryHandle> directory;
    if (!may_write(real, true, &directory)) {
      return -1;
    }
    if (!local_path(real)) {
      return VSIRmdir(real.c_str());
    }
    if (!directory) {
      return -1;
    }
    return remove_empty_directory_at(*directory, basename_of(real));
  });
}

// The directory as this process sees it: pending unlinks hidden, files being written shown,
// IDEM's own temporary directories hidden.
char** VsiIdemFilesystemHandler::ReadDirEx(const char* dirname, int max_files) {
  return guarded(nullptr, [&]() -> char** {
    const std::string real_dir = real_absolute(dirname);
    CPLStringList listed(VSIReadDirEx(real_dir.c_str(), max_files));
    const bool dir_exists = listed.List() != nullptr;
    const std::string prefix = real_dir == "/" ? "/" : real_dir + "/";
    VsiIdemState::Locked shared = state().lock();
    CPLStringList visible;
    std::set<std::string> seen;
    for (int i = 0; i < listed.size(); ++i) {
      const std::string name = listed[i];
      if (name.rfind(k_temp_prefix, 0) == 0) {
        continue;
      }
      const std::string full = prefix + name;
      if (shared.unlink_pending(full) && !shared.live_entry(full)) {
        continue;
      }
      auto in_flight = shared.in_flight().find(full);
      if (in_flight != shared.in_flight().end() && in_flight->second->discard) {
        continue;
      }
      seen.insert(name);
      visible.AddString(name.c_str());
    }
    for (const auto& [path, entry] : shared.in_flight()) {
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
    shared.note_listing(real_dir, std::move(seen));
    return visible.StealList();
  });
}

int VsiIdemFilesystemHandler::Rename(const char* old_path,
                                     const char* new_path IDEM_VSI_RENAME_EXTRA_PARAMETERS) {
  return guarded(-1, [&] {
    const std::string real_old = real_absolute(old_path);
    const std::string real_new = real_absolute(new_path);
    // Both ends through the destination guard: what is renamed away leaves its name (never the
    // ledger's), what is renamed onto is replaced (never a file this process reads); locally,
    // the rename is made relative to the handles the guard looked through.
    std::optional<DirectoryHandle> from;
    std::optional<DirectoryHandle> to;
    if (!may_write(real_old, false, &from) || !may_write(real_new, true, &to)) {
      return -1;
    }
    VsiIdemState::Locked shared = state().lock();
    if (shared.in_flight().count(real_old) != 0 || shared.publishing().count(real_old) != 0) {
      errno = EBUSY;  // still being written or published: rename it once that is done
      return -1;
    }
    if (shared.unlink_pending(real_old)) {
      errno = ENOENT;
      return -1;
    }
    int result = -1;
    if (local_path(real_old) && local_path(real_new)) {
      if (!from || !to) {
        return -1;
      }
      result = ::renameat(from->fd(), basename_of(real_old).c_str(), to->fd(),
                          basename_of(real_new).c_str());
    } else {
      result = VSIRename(real_old.c_str(), real_new.c_str());
    }
    shared.note_change();
    if (result == 0) {
      shared.pending_unlinks().erase(real_new);
    }
    return result;
  });
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
  return guarded(nullptr, [&]() -> char** {
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
  });
}

bool VsiIdemFilesystemHandler::SetFileMetadata(const char* filename, CSLConstList metadata,
                                               const char* domain, CSLConstList options) {
  return guarded(false, [&] {
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
  });
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
  const std::string real = vsiidem_absolute_path(real_path);
  return state().lock().unlink_pending(real);
}

void vsiidem_cancel_unlink(const std::string& real_path) {
  const std::string real = vsiidem_absolute_path(real_path);
  if (state().lock().pending_unlinks().erase(real) != 0) {
    CPLDebug(k_debug_category, "deferred unlink of %s cancelled", real.c_str());
  }
}

uint64_t vsiidem_adopt_pre_delete(const std::string& destination) {
  const std::string real = vsiidem_absolute_path(destination);
  return state().lock().adopt(real);
}

std::vector<std::string> vsiidem_resolve_pre_delete(uint64_t adoption, bool published,
                                                    const std::vector<std::string>& files) {
  if (adoption == 0) {
    return {};
  }
  std::set<std::string> kept;
  for (const std::string& file : files) {
    kept.insert(vsiidem_absolute_path(file));
  }
  const std::vector<std::pair<std::string, PendingUnlink>> adopted =
      state().lock().take_adopted(adoption);
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
    const int result = remove_observed(path, *pending.observed);
    state().lock().note_change();
    if (result != 0 && errno != ENOENT) {
      failed.push_back(path);
    } else {
      CPLDebug(k_debug_category, "removed %s, a file of the replaced output", path.c_str());
    }
  }
  return failed;
}

void vsiidem_set_unlink_hook(UnlinkHook hook) {
  state().lock().set_hook(std::move(hook));
}

void vsiidem_set_use_hook(void (*hook)()) {
  g_use_hook = hook;
}

void vsiidem_flush_unlinks() {
  state().flush(VsiIdemState::FlushPoint::k_running);
}

}  // namespace idem
