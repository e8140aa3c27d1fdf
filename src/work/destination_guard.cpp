// SPDX-License-Identifier: MIT
// The one destination check (destination_guard.hpp).
#include "work/destination_guard.hpp"

#include <dirent.h>
#include <sys/stat.h>

#include <cstdlib>
#include <optional>

#include "base/error.hpp"
#include "base/object_store.hpp"
#include "base/paths.hpp"
#include "cpl_string.h"
#include "ledger/ledger.hpp"

namespace idem {

namespace {

// `path` (absolute) with the links of its directory resolved; the name itself is kept as it is.
std::string resolve_directory(const std::string& path) {
  char* resolved = ::realpath(dirname_of(path).c_str(), nullptr);
  if (resolved == nullptr) {
    return path;  // a missing directory: refused later, when the temporary directory is made
  }
  std::string directory = resolved;
  std::free(resolved);
  return (directory == "/" ? "" : directory) + "/" + basename_of(path);
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat first {};
  struct stat second {};
  return ::stat(a.c_str(), &first) == 0 && ::stat(b.c_str(), &second) == 0 &&
         first.st_dev == second.st_dev && first.st_ino == second.st_ino;
}

// The ledger's database and its companions, by real name, when the ledger is an SQLite file.
std::vector<std::string> ledger_files(const std::string& ledger_dsn) {
  std::vector<std::string> files;
  std::optional<std::string> database;
  try {
    database = Ledger::sqlite_path_of(ledger_dsn);
  } catch (const Error&) {
    return files;  // a malformed DSN: the ledger's own open reports it
  }
  if (!database) {
    return files;  // PostgreSQL: no file of ours
  }
  const std::string real = resolve_directory(absolute_path(*database));
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
    files.push_back(real + suffix);
  }
  return files;
}

const char* kind_of(mode_t mode) {
  if (S_ISLNK(mode)) {
    return "a symbolic link";
  }
  if (S_ISCHR(mode)) {
    return "a character device";
  }
  if (S_ISBLK(mode)) {
    return "a block device";
  }
  if (S_ISFIFO(mode)) {
    return "a FIFO (named pipe)";
  }
  if (S_ISSOCK(mode)) {
    return "a socket";
  }
  if (S_ISDIR(mode)) {
    return "a directory";
  }
  return "not a regular file";
}

// True when a descriptor of this process other than those open on /proc itself refers to the
// file of device `device` and inode `inode`.
bool open_in_this_process(dev_t device, ino_t inode) {
  DIR* fds = ::opendir("/proc/self/fd");
  if (fds == nullptr) {
    return false;  // no /proc: nothing to compare with (the driver's own source check remains)
  }
  const int own = ::dirfd(fds);
  bool found = false;
  while (const dirent* entry = ::readdir(fds)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == own) {
      continue;
    }
    struct stat info {};
    if (::fstat(static_cast<int>(fd), &info) == 0 && S_ISREG(info.st_mode) &&
        info.st_dev == device && info.st_ino == inode) {
      found = true;
      break;
    }
  }
  ::closedir(fds);
  return found;
}

[[noreturn]] void refuse_as_source(const std::string& path, const std::string& file) {
  throw DestinationRefused("the output " + path + " is one of the sources (" + file +
                           "): the work would replace its own input; write the output to "
                           "another path");
}

}  // namespace

void refuse_if_open_here(const std::string& path) {
  const std::string real = real_destination(path);
  if (is_vsi_path(real)) {
    return;
  }
  struct stat there {};
  if (::lstat(real.c_str(), &there) != 0 || !S_ISREG(there.st_mode)) {
    return;
  }
  if (open_in_this_process(there.st_dev, there.st_ino)) {
    throw DestinationRefused(
        path +
        " is open in this process (a source this work reads, or a dataset not "
        "closed yet): writing over it would replace what is being read with what "
        "is made from it; write the output to another path, or close the dataset "
        "first");
  }
}

std::string real_destination(const std::string& path) {
  std::string real = is_vsiidem_path(path) ? vsiidem_real_path(path) : path;
  if (is_vsi_path(real)) {
    return real;
  }
  return resolve_directory(absolute_path(real));
}

std::string describe_not_replaceable(const std::string& path, mode_t mode) {
  std::string message = path + " is " + kind_of(mode) + ": IDEM publishes a new regular file by ";
  message += "rename and never writes through a link or over a special file or directory; ";
  if (S_ISLNK(mode)) {
    message += "name the link's target instead, or remove the link";
  } else {
    message += "write the output to another path";
  }
  return message;
}

void check_destination(const std::string& path, const DestinationRules& rules) {
  const std::string real = real_destination(path);
  if (is_vsi_path(real)) {
    // An object has one name (no links, no hard links): a source of that name is refused.
    for (const std::string& file : rules.source_files) {
      if (real_destination(file) == real) {
        refuse_as_source(path, file);
      }
    }
    return;
  }
  struct stat there {};
  const bool exists = ::lstat(real.c_str(), &there) == 0;
  if (exists && !S_ISREG(there.st_mode) && !(S_ISDIR(there.st_mode) && rules.directory_dataset)) {
    throw DestinationRefused(describe_not_replaceable(path, there.st_mode));
  }
  const std::vector<std::string> ledger = ledger_files(rules.ledger_dsn);
  for (size_t i = 0; i < ledger.size(); ++i) {
    if (real == ledger[i] || (exists && same_file(real, ledger[i]))) {
      throw DestinationRefused(
          path + " is " +
          (i == 0 ? "the ledger database (" : "a companion of the ledger database (") + ledger[i] +
          "): writing there would replace or corrupt the ledger; choose another "
          "output path");
    }
  }
  for (const std::string& file : rules.source_files) {
    if (is_vsi_path(file)) {
      continue;
    }
    if (real_destination(file) == real || (exists && same_file(real, file))) {
      refuse_as_source(path, file);
    }
  }
  if (rules.replaces && exists) {
    refuse_if_open_here(path);
  }
}

void refuse_updating_options(
    const std::vector<std::pair<std::string, std::string>>& creation_options) {
  // Checked against every driver's creation-option list of GDAL 3.6, 3.10 and 3.13 by
  // autotest/test_safety.py::test_every_creation_option_that_updates_an_existing_file_is_refused.
  static const char* const k_updating[] = {"APPEND_SUBDATASET"};
  for (const auto& [name, value] : creation_options) {
    for (const char* updating : k_updating) {
      if (EQUAL(name.c_str(), updating) && CPLTestBool(value.c_str())) {
        throw Error(ErrorKind::k_usage,
                    "-co " + name + "=" + value +
                        " adds to an existing file, but IDEM publishes a new file in place of "
                        "the old one, which would lose what the file held: run this command "
                        "without IDEM, or write into a new file");
      }
    }
  }
}

}  // namespace idem
