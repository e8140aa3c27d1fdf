// SPDX-License-Identifier: MIT
// The commit protocol (see atomic_output.hpp): a temporary directory beside the final path,
// published by fsync + rename of every file in it (primary last) + fsync of the directory.
// The guarantees we rely on (rename atomic within a filesystem, fsync of a directory making a
// rename durable) are POSIX ones, not GDAL's; Linux's renameat2 keeps what a publish replaced, and
// its sync_file_range only starts the writeback the fsyncs wait for.
#include "work/atomic_output.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "base/object_store.hpp"
#include "base/paths.hpp"
#include "base/safe_delete.hpp"
#include "work/destination_guard.hpp"
#include "work/lease.hpp"

namespace idem {

namespace {

std::string errno_text(int error_number) {
  return std::strerror(error_number);
}

std::string join_path(const std::string& dir, const std::string& name) {
  if (!dir.empty() && dir.back() == '/') {
    return dir + name;
  }
  return dir + "/" + name;
}

// Why a directory cannot take new files, with what to do about it.
std::string describe_unwritable_directory(const std::string& dir, int error_number) {
  switch (error_number) {
    case ENOENT:
      return "destination directory " + dir + " does not exist; create it first";
    case ENOTDIR:
      return "destination directory " + dir +
             " is not a directory (a component of the path is a regular file); "
             "choose another output path";
    case EROFS:
      return "destination directory " + dir +
             " is on a read-only filesystem; write the output to a writable location";
    case EACCES:
    case EPERM:
      return "destination directory " + dir + " is not writable (" + errno_text(error_number) +
             "); fix its permissions or choose another output path";
    case ENOSPC:
    case EDQUOT:
      return "no space left to create a temporary directory in " + dir + " (" +
             errno_text(error_number) + "); free some space and retry";
    default:
      return "cannot create a temporary directory in " + dir + ": " + errno_text(error_number);
  }
}

std::vector<std::string> list_directory(const std::string& dir) {
  std::optional<std::vector<std::string>> names = directory_entries(dir);
  if (!names) {
    throw Error(ErrorKind::k_io,
                "cannot list temporary directory " + dir + ": " + errno_text(errno));
  }
  return *names;
}

// Calls `on_file` on a regular file, or on every regular file of a directory dataset (Zarr), and
// `on_directory` on each directory after its entries. Never through a link (lstat): a link or
// anything else that is not a regular file or a directory is left alone.
void walk_tree(const std::string& path, const std::function<void(const std::string&)>& on_file,
               const std::function<void(const std::string&)>& on_directory) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) {
    return;
  }
  if (S_ISDIR(info.st_mode)) {
    for (const auto& name : directory_entries(path).value_or(std::vector<std::string>())) {
      walk_tree(join_path(path, name), on_file, on_directory);
    }
    on_directory(path);
  } else if (S_ISREG(info.st_mode)) {
    on_file(path);
  }
}

// A file, or every file and directory of a directory dataset, synced to disk.
void fsync_tree(const std::string& path) {
  walk_tree(path, fsync_path, fsync_path);
}

// Starts writing a file, or every file of a directory dataset, to disk without waiting for it: the
// fsyncs that follow find their data on its way, and a journalling filesystem (ext4) then commits
// the blocks of all the files in its first fsync's transaction, where one file after another
// each waited for a commit of its own (about 0.1-0.2 ms of a PNG tile with its .aux.xml,
// bench/RESULTS.md section 9). A hint only: the fsyncs report what fails.
void start_writeback_tree(const std::string& path) {
  walk_tree(
      path,
      [](const std::string& file) {
        const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd >= 0) {
          ::sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
          ::close(fd);
        }
      },
      [](const std::string&) {});
}

// Best effort, never throws: the temporary directory this attempt made (or an abandoned one of
// the same work), through the one delete owner (safe_delete.hpp): never through a link.
// A recorded sidecar of the replaced output, moved into the temporary directory by retire().
constexpr const char* k_retired_prefix = ".retired.";

void remove_tree(const std::string& path) {
  delete_own_directory(path);
}

// Whether `path` is now one of the `recorded` files.
bool is_recorded(const std::string& path, const std::vector<KnownFile>& recorded) {
  for (const KnownFile& file : recorded) {
    if (file.path == path && is_known_file(file)) {
      return true;
    }
  }
  return false;
}

// The files an abandoned attempt's publish exchanged out of `final_dir` and kept in
// `abandoned`, put back where they were when a completion recorded them and what is there now
// was not recorded (remove_abandoned_temp_dirs).
void restore_replaced(const std::string& abandoned, const std::string& final_dir,
                      const std::vector<KnownFile>& recorded) {
  if (recorded.empty()) {
    return;
  }
  const std::string retired_prefix = k_retired_prefix;
  for (const std::string& entry :
       directory_entries(abandoned).value_or(std::vector<std::string>())) {
    // A sidecar the publish moved aside (retire) or exchanged out (place).
    const std::string name =
        entry.rfind(retired_prefix, 0) == 0 ? entry.substr(retired_prefix.size()) : entry;
    const std::string kept = join_path(abandoned, entry);
    const std::string final_path = join_path(final_dir, name);
    bool was_recorded = false;
    for (const KnownFile& file : recorded) {
      KnownFile there = file;
      there.path = kept;
      was_recorded = was_recorded || (file.path == final_path && is_known_file(there));
    }
    if (!was_recorded || is_recorded(final_path, recorded)) {
      continue;
    }
    if (::renameat2(AT_FDCWD, kept.c_str(), AT_FDCWD, final_path.c_str(), RENAME_EXCHANGE) != 0) {
      ::renameat2(AT_FDCWD, kept.c_str(), AT_FDCWD, final_path.c_str(), RENAME_NOREPLACE);
    }
  }
}

}  // namespace

std::string temp_token(const std::string& attempt_token, const std::string& owner) {
  return owner.empty() ? attempt_token : attempt_token + "." + owner;
}

std::string token_of_temp_dir(const std::string& name) {
  const std::string prefix = k_temp_prefix;
  if (name.rfind(prefix, 0) != 0) {
    return std::string();
  }
  const std::string token = name.substr(prefix.size());
  return token.substr(0, token.find('.'));
}

int remove_abandoned_temp_dirs(const std::string& final_path, const std::string& owner,
                               const std::string& own_temp_dir,
                               const std::vector<KnownFile>& recorded) {
  if (owner.empty()) {
    return 0;
  }
  const std::string dir =
      is_object_store_path(final_path) ? local_temp_root() : dirname_of(final_path);
  const std::string prefix = k_temp_prefix;
  const std::string suffix = "." + owner;
  int removed = 0;
  DIR* handle = ::opendir(dir.c_str());
  if (handle == nullptr) {
    return 0;
  }
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(handle)) {
    const std::string name = entry->d_name;
    if (name.rfind(prefix, 0) == 0 && name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      names.push_back(name);
    }
  }
  ::closedir(handle);
  for (const std::string& name : names) {
    const std::string path = join_path(dir, name);
    if (path != own_temp_dir) {
      remove_abandoned_temp_dir(path, recorded);
      ++removed;
    }
  }
  return removed;
}

DeleteOutcome remove_abandoned_temp_dir(const std::string& temp_dir,
                                        const std::vector<KnownFile>& recorded) {
  restore_replaced(temp_dir, dirname_of(temp_dir), recorded);
  return delete_own_directory(temp_dir);
}

void fsync_path(const std::string& path) {
  // O_RDONLY works for directories and for files alike; fsync through any descriptor of the
  // inode flushes it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw Error(ErrorKind::k_io, "cannot open " + path + " to sync it: " + errno_text(errno));
  }
  if (::fsync(fd) != 0) {
    const int error_number = errno;
    ::close(fd);
    // Some filesystems refuse fsync on directories; that is not a data-loss signal.
    if (error_number == EINVAL || error_number == EROFS) {
      struct stat info {};
      if (::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {
        return;
      }
    }
    throw Error(ErrorKind::k_io, "cannot sync " + path + " to disk: " + errno_text(error_number) +
                                     "; the output may not be durable, retry the work");
  }
  ::close(fd);
}

EarlySync::EarlySync(std::string path, std::chrono::milliseconds period,
                     std::function<int(int)> sync_file)
    : m_path(std::move(path)),
      m_period(period),
      m_sync_file(std::move(sync_file)),
      m_thread([this] { run(); }) {}

EarlySync::~EarlySync() {
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_stop = true;
  }
  m_wake.notify_all();
  m_thread.join();
}

void EarlySync::run() {
  int fd = -1;
  std::chrono::milliseconds wait = m_period;
  std::unique_lock<std::mutex> lock(m_mutex);
  while (!m_wake.wait_for(lock, wait, [this] { return m_stop; })) {
    if (fd < 0) {
      fd = ::open(m_path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    }
    wait = m_period;
    if (fd >= 0) {
      lock.unlock();  // the destructor must not wait for the lock while this syncs
      const auto started = std::chrono::steady_clock::now();
      m_sync_file(fd);
      // A sync that had data to write is followed by the next one at once: while GDAL writes
      // faster than the disk takes it, the syncs run back to back and the last one (the
      // commit's) finds little left.
      if (std::chrono::steady_clock::now() - started > std::chrono::milliseconds(2)) {
        wait = std::chrono::milliseconds(0);
      }
      lock.lock();
    }
  }
  if (fd >= 0) {
    ::close(fd);
  }
}

AtomicOutput::AtomicOutput(const std::string& final_path, const std::string& token)
    : m_final_path(final_path) {
  if (final_path.empty() || final_path.back() == '/') {
    throw Error(ErrorKind::k_usage,
                "output path '" + final_path + "' does not name a file; give a file name");
  }
  m_object = is_object_store_path(final_path);
  if (!m_object && is_vsi_path(final_path)) {
    throw Error(ErrorKind::k_usage,
                "output path " + final_path +
                    " is on a GDAL virtual filesystem that cannot be published atomically; "
                    "write to a local path or to object storage (/vsis3/, /vsigs/, /vsiaz/)");
  }
  if (token.empty() || token.find('/') != std::string::npos) {
    throw Error(ErrorKind::k_internal, "invalid temporary token '" + token + "'");
  }
  // An object appears whole or not at all when its upload completes, so the temporary copy of
  // an object output is local (CPL_TMPDIR) and is uploaded to the final key directly.
  const std::string dir = m_object ? local_temp_root() : dirname_of(final_path);
  struct stat dir_info {};
  if (::stat(dir.c_str(), &dir_info) != 0) {
    throw Error(ErrorKind::k_io, describe_unwritable_directory(dir, errno));
  }
  if (!S_ISDIR(dir_info.st_mode)) {
    throw Error(ErrorKind::k_io, describe_unwritable_directory(dir, ENOTDIR));
  }
  m_temp_dir = join_path(dir, std::string(k_temp_prefix) + token);
  if (::mkdir(m_temp_dir.c_str(), 0700) != 0) {
    const int error_number = errno;
    if (error_number == EEXIST) {
      throw Error(ErrorKind::k_io, "temporary directory " + m_temp_dir +
                                       " already exists; another attempt is using the same "
                                       "token (remove it with `gdal-idem reap` if stale)");
    }
    throw Error(ErrorKind::k_io, describe_unwritable_directory(dir, error_number));
  }
  m_temp_path = join_path(m_temp_dir, basename_of(final_path));
}

AtomicOutput::~AtomicOutput() {
  if (!m_committed && !m_temp_dir.empty()) {
    roll_back();  // published but never settled: what this attempt put in place is taken back
    remove_tree(m_temp_dir);
  }
}

std::vector<std::string> AtomicOutput::commit(bool durable) {
  std::vector<std::string> published = publish(durable);
  if (!m_object) {
    settle();
  }
  return published;
}

std::vector<std::string> AtomicOutput::ordered_names() const {
  const std::string primary = basename_of(m_final_path);
  // Sidecars first, the primary last: a reader (or `gdal-idem verify`) that sees the primary
  // sees a complete dataset.
  std::vector<std::string> names = list_directory(m_temp_dir);
  std::vector<std::string> ordered;
  bool has_primary = false;
  for (const auto& name : names) {
    if (name == primary) {
      has_primary = true;
    } else {
      ordered.push_back(name);
    }
  }
  if (!has_primary) {
    throw Error(ErrorKind::k_io, "nothing to publish: " + m_temp_path +
                                     " was not written (the driver failed before creating it)");
  }
  ordered.push_back(primary);
  return ordered;
}

void AtomicOutput::observe_objects() {
  m_expected.clear();
  if (!m_object) {
    return;
  }
  const std::string final_dir = dirname_of(m_final_path);
  for (const auto& name : ordered_names()) {
    VSIStatBufL info;
    const std::string from = join_path(m_temp_dir, name);
    const std::string to = join_path(final_dir, name);
    if (VSIStatL(from.c_str(), &info) != 0 ||
        !conditional_upload_applies(to, static_cast<int64_t>(info.st_size))) {
      continue;
    }
    m_expected[to] = ExpectedObject{current_object_version(to)};
  }
}

std::vector<std::string> AtomicOutput::publish(bool durable) {
  if (m_committed || !m_placed.empty()) {
    throw Error(ErrorKind::k_internal, "output " + m_final_path + " was already committed");
  }
  const std::string final_dir = dirname_of(m_final_path);
  const std::vector<std::string> ordered = ordered_names();
  if (m_object) {
    return upload(ordered);
  }
  if (durable) {
    if (ordered.size() > 1) {
      for (const auto& name : ordered) {
        start_writeback_tree(join_path(m_temp_dir, name));
      }
    }
    for (const auto& name : ordered) {
      fsync_tree(join_path(m_temp_dir, name));
    }
  }

  std::vector<std::string> published;
  try {
    for (const auto& name : ordered) {
      if (name == ordered.back()) {
        retire(ordered);  // the replaced output's other members go before the primary comes
        test_pause("during_publish");  // the sidecars are in place, the primary is not
      }
      place(join_path(m_temp_dir, name), join_path(final_dir, name));
      published.push_back(join_path(final_dir, name));
    }
  } catch (...) {
    roll_back();
    throw;
  }
  if (durable) {
    fsync_path(final_dir);
  }
  m_durable = durable;
  return published;
}

// One file into place, keeping what it replaces: exchanged with it (RENAME_EXCHANGE, atomic),
// so the replaced file is then at `from`; renamed without replacing anything when nothing is
// there. Where the filesystem has no exchange (EINVAL: NFS, some FUSE filesystems), the
// replaced file is kept by a hard link beside the temporary file, then replaced by a rename.
void AtomicOutput::place(const std::string& from, const std::string& to) {
  struct stat ours {};
  if (::lstat(from.c_str(), &ours) != 0) {
    throw Error(ErrorKind::k_io, "cannot publish " + from + ": " + errno_text(errno));
  }
  struct stat there {};
  // A directory dataset (Zarr) replaces the directory of the one it replaces, exchanged with it
  // as a file is; a file never replaces a directory.
  const bool directories = S_ISDIR(ours.st_mode);
  const bool occupied = ::lstat(to.c_str(), &there) == 0;
  if (occupied && S_ISDIR(there.st_mode) && !directories) {
    throw Error(ErrorKind::k_io, "cannot rename " + from + " to " + to +
                                     ": a directory is in the way at " + to + ", remove it");
  }
  // Invariant I2 at the last step every publish takes: only a regular file (or a directory
  // dataset's directory) is ever replaced; a link, device, FIFO or socket stays as it is.
  if (occupied && !S_ISREG(there.st_mode) && !S_ISDIR(there.st_mode)) {
    throw Error(ErrorKind::k_usage, describe_not_replaceable(to, there.st_mode));
  }
  Placed placed{from,
                to,
                std::string(),
                ours.st_dev,
                ours.st_ino,
                ours.st_size,
                int64_t(ours.st_mtim.tv_sec) * 1000000000 + ours.st_mtim.tv_nsec};
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) {
    m_placed.push_back(placed);
    return;
  }
  int error_number = errno;
  if (error_number == EEXIST &&
      ::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) == 0) {
    placed.held = from;  // the replaced file is there now
    m_placed.push_back(placed);
    return;
  }
  if (error_number == EEXIST) {
    error_number = errno;
  }
  if ((error_number == EINVAL || error_number == ENOSYS) && directories) {
    throw Error(ErrorKind::k_io, "cannot publish the directory " + from + " over " + to +
                                     ": this file system cannot exchange two directories "
                                     "atomically (renameat2 RENAME_EXCHANGE); remove " +
                                     to + " and run again");
  }
  if (error_number == EINVAL || error_number == ENOSYS) {
    const std::string kept = from + ".replaced";
    const bool replaces = ::link(to.c_str(), kept.c_str()) == 0;
    if (::rename(from.c_str(), to.c_str()) == 0) {
      placed.held = replaces ? kept : std::string();
      m_placed.push_back(placed);
      return;
    }
    error_number = errno;
  }
  std::string message = "cannot rename " + from + " to " + to + ": " + errno_text(error_number);
  if (error_number == EISDIR || error_number == ENOTEMPTY) {
    message += "; a directory is in the way at " + to + ", remove it";
  } else if (error_number == EXDEV) {
    message += "; the temporary directory is on another filesystem";
  }
  throw Error(ErrorKind::k_io, message);
}

void AtomicOutput::retire_with_publish(std::vector<KnownFile> files) {
  m_to_retire = std::move(files);
}

void AtomicOutput::retire(const std::vector<std::string>& placed_names) {
  const std::string final_dir = dirname_of(m_final_path);
  for (const KnownFile& file : m_to_retire) {
    const std::string name = basename_of(file.path);
    if (dirname_of(file.path) != final_dir ||
        std::find(placed_names.begin(), placed_names.end(), name) != placed_names.end() ||
        !is_known_file(file)) {
      continue;  // replaced by the new output's own file, or not the file recorded any more
    }
    const std::string aside = join_path(m_temp_dir, k_retired_prefix + name);
    if (::renameat2(AT_FDCWD, file.path.c_str(), AT_FDCWD, aside.c_str(), RENAME_NOREPLACE) == 0) {
      m_retired.push_back(Retired{aside, file.path});
    }
  }
}

void AtomicOutput::settle() {
  m_committed = true;
  m_placed.clear();
  m_retired.clear();
  // What is left (the replaced files, a leftover created after listing) goes.
  remove_tree(m_temp_dir);
}

void AtomicOutput::roll_back() noexcept {
  // Primary first (it was placed last), so that no reader sees it with older sidecars.
  for (auto it = m_placed.rbegin(); it != m_placed.rend(); ++it) {
    struct stat now {};
    if (::lstat(it->final_path.c_str(), &now) != 0 || now.st_dev != it->device ||
        now.st_ino != it->inode) {
      continue;  // no longer ours: another worker's file is there, and stays
    }
    if (it->held.empty()) {
      // This attempt's own file (or directory dataset), while it is still the one it placed.
      if (S_ISDIR(now.st_mode)) {
        delete_own_directory(it->final_path);
      } else {
        delete_known_file(
            KnownFile{it->final_path, std::nullopt, std::nullopt, it->device, it->inode});
      }
    } else if (::renameat2(AT_FDCWD, it->held.c_str(), AT_FDCWD, it->final_path.c_str(),
                           RENAME_EXCHANGE) != 0) {
      ::rename(it->held.c_str(), it->final_path.c_str());
    }
  }
  for (const Retired& retired : m_retired) {
    // Back where it was, unless another file has been put there since (that one stays).
    ::renameat2(AT_FDCWD, retired.aside.c_str(), AT_FDCWD, retired.final_path.c_str(),
                RENAME_NOREPLACE);
  }
  m_retired.clear();
  if (!m_placed.empty() && m_durable) {
    try {
      fsync_path(dirname_of(m_final_path));
    } catch (const Error&) {
      // best effort: the renames are done
    }
  }
  m_placed.clear();
}

bool AtomicOutput::still_in_place() const {
  for (const Placed& placed : m_placed) {
    struct stat now {};
    if (::lstat(placed.final_path.c_str(), &now) != 0 || now.st_dev != placed.device ||
        now.st_ino != placed.inode) {
      return false;
    }
  }
  return true;
}

bool AtomicOutput::replaced_an_output() const {
  if (m_object) {
    const auto seen = m_expected.find(m_final_path);
    return seen != m_expected.end() && !seen->second.version.empty();
  }
  return std::any_of(m_placed.begin(), m_placed.end(), [&](const Placed& placed) {
    return placed.final_path == m_final_path && !placed.held.empty();
  });
}

std::vector<PublishedFile> AtomicOutput::placed_files() const {
  std::vector<PublishedFile> files;
  for (const Placed& placed : m_placed) {
    files.push_back(PublishedFile{placed.final_path, placed.size, placed.mtime_ns});
  }
  return files;
}

std::vector<std::string> AtomicOutput::upload(const std::vector<std::string>& ordered) {
  const std::string final_dir = dirname_of(m_final_path);
  // Each file becomes one object. A directory (a driver's dataset of many files) has no object
  // that appears at once: refused before anything is uploaded.
  for (const auto& name : ordered) {
    struct stat info {};
    const std::string from = join_path(m_temp_dir, name);
    if (::lstat(from.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) {
      throw Error(ErrorKind::k_usage,
                  "cannot upload " + from + " to " + join_path(final_dir, name) +
                      ": the driver wrote a directory, not a file, and a directory of objects "
                      "cannot be published to object storage at once; write the dataset to a "
                      "local path, or choose a single-file format");
    }
  }
  std::vector<std::string> published;
  for (const auto& name : ordered) {
    if (name == ordered.back()) {
      test_pause("during_upload");  // sidecars are up, the primary is not
    }
    const std::string to = join_path(final_dir, name);
    const auto expected = m_expected.find(to);
    const CopiedBytes sent =
        copy_vsi_file(join_path(m_temp_dir, name), to,
                      expected != m_expected.end() ? &expected->second : nullptr);
    if (name == ordered.back()) {
      m_uploaded_primary = sent;
    }
    published.push_back(to);
  }
  m_committed = true;
  remove_tree(m_temp_dir);
  return published;
}

}  // namespace idem
