// SPDX-License-Identifier: MIT
// The fenced publish of a local output (local_publisher.hpp). The guarantees relied on (rename
// atomic within a file system, fsync of a directory making a rename durable) are POSIX ones;
// Linux's renameat2 keeps what a publish replaced, and its sync_file_range only starts the
// writeback the fsyncs wait for.
#include "work/local_publisher.hpp"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <utility>

#include "base/error.hpp"
#include "base/file_descriptor.hpp"
#include "base/paths.hpp"
#include "cpl_error.h"
#include "work/destination_guard.hpp"
#include "work/lease.hpp"
#include "work/output_check.hpp"

namespace idem {

namespace {

// A recorded sidecar of the replaced output, moved into the temporary directory by retire().
constexpr const char* k_retired_prefix = ".retired.";

std::string errno_text(int error_number) {
  return std::strerror(error_number);
}

// Calls `on_file` on the regular file `name` in `directory`, or on every regular file of the
// directory dataset (Zarr) of that name, and `on_directory` on each directory after its entries.
// Never through a link: anything that is not a regular file or a directory is left alone.
void walk_tree(
    const DirectoryHandle& directory, const std::string& name,
    const std::function<void(const DirectoryHandle&, const std::string&)>& on_file,
    const std::function<void(const DirectoryHandle&, const std::string&)>& on_directory) {
  const std::optional<struct stat> info = directory.look(name);
  if (!info) {
    return;
  }
  if (S_ISDIR(info->st_mode)) {
    if (const std::optional<DirectoryHandle> inner = directory.child(name)) {
      for (const auto& entry : inner->entries().value_or(std::vector<std::string>())) {
        walk_tree(*inner, entry, on_file, on_directory);
      }
    }
    on_directory(directory, name);
  } else if (S_ISREG(info->st_mode)) {
    on_file(directory, name);
  }
}

// A file, or every file and directory of a directory dataset, synced to disk.
void sync_tree(const DirectoryHandle& directory, const std::string& name) {
  walk_tree(directory, name, sync_at, sync_at);
}

// Starts writing a file, or every file of a directory dataset, to disk without waiting for it: the
// fsyncs that follow find their data on its way, and a journalling filesystem (ext4) then commits
// the blocks of all the files in its first fsync's transaction, where one file after another
// each waited for a commit of its own (about 0.1-0.2 ms of a PNG tile with its .aux.xml,
// bench/RESULTS.md section 9). A hint only: the fsyncs report what fails.
void start_writeback_tree(const DirectoryHandle& directory, const std::string& name) {
  walk_tree(
      directory, name,
      [](const DirectoryHandle& holder, const std::string& file) {
        const FileDescriptor fd(
            ::openat(holder.fd(), file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
        if (fd.valid()) {
          ::sync_file_range(fd.get(), 0, 0, SYNC_FILE_RANGE_WRITE);
        }
      },
      [](const DirectoryHandle&, const std::string&) {});
}

}  // namespace

LocalPublisher::LocalPublisher(const DirectoryHandle& directory, TempDir& temp, std::string primary)
    : m_directory(directory), m_temp(temp), m_primary(std::move(primary)) {}

std::vector<std::string> LocalPublisher::ordered_names() const {
  // Sidecars first, the primary last: a reader (or `gdal-idem verify`) that sees the primary
  // sees a complete dataset.
  std::vector<std::string> ordered;
  bool has_primary = false;
  for (const auto& name : m_temp.names()) {
    if (name == m_primary) {
      has_primary = true;
    } else {
      ordered.push_back(name);
    }
  }
  if (!has_primary) {
    throw Error(ErrorKind::k_io, "nothing to publish: " + m_temp.path() + "/" + m_primary +
                                     " was not written (the driver failed before creating it)");
  }
  ordered.push_back(m_primary);
  return ordered;
}

std::vector<std::string> LocalPublisher::publish(bool durable) {
  if (!m_placed.empty()) {
    throw Error(ErrorKind::k_internal,
                "output " + m_directory.name_path(m_primary) + " was already published");
  }
  const std::vector<std::string> ordered = ordered_names();
  const DirectoryHandle& temp = m_temp.handle();
  if (durable) {
    if (ordered.size() > 1) {
      for (const auto& name : ordered) {
        start_writeback_tree(temp, name);
      }
    }
    for (const auto& name : ordered) {
      sync_tree(temp, name);
    }
  }
  // Handles, not names: the publish goes into the directory opened before the work, and only
  // while the output's path still leads to it.
  if (!m_directory.still_at_path()) {
    throw DestinationRefused(
        "the output's directory " + m_directory.path() +
        " was moved, or replaced by a link, while the work ran: nothing was published there; "
        "check who changes that directory, and run again");
  }
  std::vector<std::string> published;
  try {
    for (const auto& name : ordered) {
      if (name == ordered.back()) {
        retire(ordered);  // the replaced output's other members go before the primary comes
        test_pause("during_publish");  // the sidecars are in place, the primary is not
      }
      place(name);
      published.push_back(m_directory.name_path(name));
    }
  } catch (...) {
    roll_back();
    throw;
  }
  if (durable) {
    m_directory.sync();
  }
  m_durable = durable;
  // Nothing was replaced (a first write): the temporary directory is empty, and a roll back
  // would not need it. It goes now rather than after the completion, so that a worker killed in
  // between leaves nothing behind.
  const bool holds_nothing =
      m_retired.empty() && std::all_of(m_placed.begin(), m_placed.end(),
                                       [](const Placed& placed) { return placed.held.empty(); });
  if (holds_nothing) {
    m_temp.remove();
  }
  return published;
}

// Invariant I2 at the last step every publish takes: only a regular file, or a directory
// dataset's directory that a completion recorded there unchanged, is ever replaced.
void LocalPublisher::check_replaceable(const std::string& name, const struct stat& ours,
                                       const std::optional<struct stat>& there) const {
  if (!there) {
    return;
  }
  const std::string target = m_directory.name_path(name);
  if (S_ISDIR(there->st_mode)) {
    if (!S_ISDIR(ours.st_mode)) {
      throw Error(ErrorKind::k_io, "cannot rename " + m_temp.path() + "/" + name + " to " + target +
                                       ": a directory is in the way at " + target + ", remove it");
    }
    const std::optional<TreeSummary> now = tree_summary_at(m_directory, name);
    if (!m_recorded_tree || !now || now->sha256 != *m_recorded_tree) {
      throw DestinationRefused(describe_foreign_directory(target));
    }
    return;
  }
  if (!S_ISREG(there->st_mode)) {
    throw DestinationRefused(describe_not_replaceable(target, there->st_mode));
  }
}

// One file into place, keeping what it replaces: exchanged with it (RENAME_EXCHANGE, atomic), so
// the replaced file is then in the temporary directory under the same name; renamed without
// replacing anything when nothing is there. Where the file system has no exchange (EINVAL: NFS,
// some FUSE file systems), the replaced file is kept by a hard link in the temporary directory,
// then replaced by a rename.
void LocalPublisher::place(const std::string& name) {
  const DirectoryHandle& temp = m_temp.handle();
  const std::optional<struct stat> ours = temp.look(name);
  if (!ours) {
    throw Error(ErrorKind::k_io,
                "cannot publish " + m_temp.path() + "/" + name + ": " + errno_text(errno));
  }
  const std::optional<struct stat> there = m_directory.look(name);
  check_replaceable(name, *ours, there);
  const bool directories = S_ISDIR(ours->st_mode);
  Placed placed{name,          std::string(),      Inode::of(*ours),
                ours->st_size, mtime_ns_of(*ours), directories};
  if (::renameat2(temp.fd(), name.c_str(), m_directory.fd(), name.c_str(), RENAME_NOREPLACE) == 0) {
    m_placed.push_back(placed);
    return;
  }
  int error_number = errno;
  if (error_number == EEXIST) {
    if (::renameat2(temp.fd(), name.c_str(), m_directory.fd(), name.c_str(), RENAME_EXCHANGE) ==
        0) {
      placed.held = name;  // the replaced file is in the temporary directory now
      m_placed.push_back(placed);
      return;
    }
    error_number = errno;
  }
  const std::string target = m_directory.name_path(name);
  if ((error_number == EINVAL || error_number == ENOSYS) && directories) {
    throw Error(ErrorKind::k_io, "cannot publish the directory " + m_temp.path() + "/" + name +
                                     " over " + target +
                                     ": this file system cannot exchange two directories "
                                     "atomically (renameat2 RENAME_EXCHANGE); remove " +
                                     target + " and run again");
  }
  if (error_number == EINVAL || error_number == ENOSYS) {
    const std::string kept = name + ".replaced";
    const bool replaces = ::linkat(m_directory.fd(), name.c_str(), temp.fd(), kept.c_str(), 0) == 0;
    if (::renameat(temp.fd(), name.c_str(), m_directory.fd(), name.c_str()) == 0) {
      placed.held = replaces ? kept : std::string();
      m_placed.push_back(placed);
      return;
    }
    error_number = errno;
  }
  std::string message = "cannot rename " + m_temp.path() + "/" + name + " to " + target + ": " +
                        errno_text(error_number);
  if (error_number == EISDIR || error_number == ENOTEMPTY) {
    message += "; a directory is in the way at " + target + ", remove it";
  } else if (error_number == EXDEV) {
    message += "; the temporary directory is on another filesystem";
  }
  throw Error(ErrorKind::k_io, message);
}

void LocalPublisher::retire_with_publish(std::vector<KnownFile> files) {
  m_to_retire = std::move(files);
}

void LocalPublisher::allow_replacing_directory(std::string recorded_tree) {
  m_recorded_tree = std::move(recorded_tree);
}

void LocalPublisher::retire(const std::vector<std::string>& placed_names) {
  for (const KnownFile& file : m_to_retire) {
    const std::string name = basename_of(file.path);
    if (dirname_of(file.path) != m_directory.path() ||
        std::find(placed_names.begin(), placed_names.end(), name) != placed_names.end() ||
        !is_known_file_at(m_directory, name, file)) {
      continue;  // replaced by the new output's own file, or not the file recorded any more
    }
    const std::string aside = k_retired_prefix + name;
    if (::renameat2(m_directory.fd(), name.c_str(), m_temp.handle().fd(), aside.c_str(),
                    RENAME_NOREPLACE) == 0) {
      m_retired.push_back(Retired{aside, name});
    }
  }
}

// A directory dataset exchanged out that no longer has the tree recorded (something was written
// into it between the look and the exchange) is not IDEM's to remove: it is moved beside the
// output under a name of its own, and a warning names it.
void LocalPublisher::keep_changed_directory(const Placed& placed) {
  const std::optional<TreeSummary> now = tree_summary_at(m_temp.handle(), placed.held);
  if (now && m_recorded_tree && now->sha256 == *m_recorded_tree) {
    return;
  }
  const std::string kept =
      placed.name + ".idem-replaced-" + m_temp.name().substr(std::string(k_temp_prefix).size());
  if (::renameat2(m_temp.handle().fd(), placed.held.c_str(), m_directory.fd(), kept.c_str(),
                  RENAME_NOREPLACE) == 0) {
    CPLError(CE_Warning, CPLE_AppDefined,
             "IDEM: the directory %s changed after IDEM looked at it and before the new output "
             "replaced it; it is kept as %s",
             m_directory.name_path(placed.name).c_str(), m_directory.name_path(kept).c_str());
  } else {
    m_temp.keep();  // never removed with what it holds
    CPLError(CE_Warning, CPLE_AppDefined,
             "IDEM: the directory replaced at %s changed after IDEM looked at it; it is kept in "
             "%s",
             m_directory.name_path(placed.name).c_str(), m_temp.path().c_str());
  }
}

void LocalPublisher::settle() {
  for (const Placed& placed : m_placed) {
    if (placed.directory && !placed.held.empty()) {
      keep_changed_directory(placed);
    }
  }
  m_placed.clear();
  m_retired.clear();
  // What is left (the replaced files, a leftover created after listing) goes.
  m_temp.remove();
}

void LocalPublisher::roll_back() noexcept {
  const DirectoryHandle& temp = m_temp.handle();
  // Primary first (it was placed last), so that no reader sees it with older sidecars.
  for (auto it = m_placed.rbegin(); it != m_placed.rend(); ++it) {
    const std::optional<struct stat> now = m_directory.look(it->name);
    if (!now || Inode::of(*now) != it->identity) {
      continue;  // no longer ours: another worker's file is there, and stays
    }
    if (it->held.empty()) {
      // This attempt's own file (or directory dataset), while it is still the one it placed.
      if (S_ISDIR(now->st_mode)) {
        delete_own_directory_at(m_directory, it->name);
      } else {
        delete_known_file_at(m_directory, it->name,
                             KnownFile{std::string(), std::nullopt, std::nullopt,
                                       it->identity.device, it->identity.inode});
      }
    } else if (::renameat2(temp.fd(), it->held.c_str(), m_directory.fd(), it->name.c_str(),
                           RENAME_EXCHANGE) != 0) {
      ::renameat(temp.fd(), it->held.c_str(), m_directory.fd(), it->name.c_str());
    }
  }
  for (const Retired& retired : m_retired) {
    // Back where it was, unless another file has been put there since (that one stays).
    ::renameat2(temp.fd(), retired.aside.c_str(), m_directory.fd(), retired.name.c_str(),
                RENAME_NOREPLACE);
  }
  m_retired.clear();
  if (!m_placed.empty() && m_durable) {
    try {
      m_directory.sync();
    } catch (const Error&) {
      // best effort: the renames are done
    }
  }
  m_placed.clear();
}

std::vector<PublishedFile> LocalPublisher::placed_files() const {
  std::vector<PublishedFile> files;
  for (const Placed& placed : m_placed) {
    files.push_back(
        PublishedFile{m_directory.name_path(placed.name), placed.size, placed.mtime_ns});
  }
  return files;
}

bool LocalPublisher::still_in_place() const {
  return std::all_of(m_placed.begin(), m_placed.end(), [&](const Placed& placed) {
    const std::optional<struct stat> now = m_directory.look(placed.name);
    return now && Inode::of(*now) == placed.identity;
  });
}

bool LocalPublisher::replaced_an_output() const {
  return std::any_of(m_placed.begin(), m_placed.end(), [&](const Placed& placed) {
    return placed.name == m_primary && !placed.held.empty();
  });
}

}  // namespace idem
