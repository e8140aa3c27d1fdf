// SPDX-License-Identifier: MIT
// The one destination check (destination_guard.hpp).
#include "work/destination_guard.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <optional>

#include "base/error.hpp"
#include "base/file_identity.hpp"
#include "base/open_descriptors.hpp"
#include "base/paths.hpp"
#include "cpl_string.h"
#include "ledger/ledger.hpp"
#include "store/object_store.hpp"

namespace idem {

namespace {

// `path` with every link resolved as the kernel (and SQLite, which resolves a database's links
// before it names its companions) would; a missing name keeps its directory resolved.
std::string resolved(const std::string& path) {
  if (char* real = ::realpath(path.c_str(), nullptr)) {
    std::string result = real;
    std::free(real);
    return result;
  }
  if (char* directory = ::realpath(dirname_of(path).c_str(), nullptr)) {
    std::string result = directory;
    std::free(directory);
    return (result == "/" ? "" : result) + "/" + basename_of(path);
  }
  return path;
}

// The ledger's database and its companions (-wal, -shm, -journal) when the ledger is an SQLite
// file: where each name goes in its directory (by the directory's identity), and the identity of
// each that exists. Both the name given and the name SQLite resolves it to.
struct LedgerFiles {
  std::vector<std::pair<NameSlot, std::string>> slots;  // with the path, for the message
  std::vector<std::pair<Inode, std::string>> files;
};

LedgerFiles ledger_files(const std::string& ledger_dsn) {
  LedgerFiles found;
  std::optional<std::string> database;
  try {
    database = Ledger::sqlite_path_of(ledger_dsn);
  } catch (const Error&) {
    return found;  // a malformed DSN: the ledger's own open reports it
  }
  if (!database) {
    return found;  // PostgreSQL: no file of ours
  }
  const std::string given = absolute_path(*database);
  const std::string real = resolved(given);
  for (const std::string& spelling : {given, real}) {
    const std::optional<Inode> directory = inode_of(dirname_of(spelling));
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
      const std::string path = spelling + suffix;
      if (directory) {
        found.slots.emplace_back(NameSlot{*directory, basename_of(path)}, path);
      }
      if (const std::optional<Inode> file = inode_of(path)) {
        found.files.emplace_back(*file, path);
      }
    }
  }
  return found;
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

[[noreturn]] void refuse_as_source(const std::string& path, const std::string& file) {
  throw DestinationRefused("the output " + path + " is one of the sources (" + file +
                           "): the work would replace its own input; write the output to "
                           "another path");
}

[[noreturn]] void refuse_as_ledger(const std::string& path, const std::string& ledger_file) {
  const bool database =
      ledger_file.size() < 4 ||
      (ledger_file.compare(ledger_file.size() - 4, 4, "-wal") != 0 &&
       ledger_file.compare(ledger_file.size() - 4, 4, "-shm") != 0 &&
       (ledger_file.size() < 8 || ledger_file.compare(ledger_file.size() - 8, 8, "-journal") != 0));
  throw DestinationRefused(
      path + " is " +
      (database ? "the ledger database (" : "a companion of the ledger database (") + ledger_file +
      "): writing there would replace or corrupt the ledger; choose another "
      "output path");
}

// The sources by name (objects, which have one name each) and by identity (local files, the
// file at the bottom of an archive chain included).
void refuse_sources(const std::string& path, const std::string& real,
                    const std::optional<Inode>& there, const std::vector<std::string>& sources) {
  for (const std::string& file : sources) {
    if (is_object_store_path(real) || is_object_store_path(file)) {
      if (real_destination(file) == real) {
        refuse_as_source(path, file);
      }
      continue;
    }
    if (!there) {
      continue;  // nothing is there: no source can be
    }
    const std::optional<std::string> beneath = local_file_beneath(file);
    if (beneath && inode_of(*beneath) == there) {
      refuse_as_source(path, file);
    }
  }
}

}  // namespace

std::string real_destination(const std::string& path) {
  std::string real = is_vsiidem_path(path) ? vsiidem_real_path(path) : path;
  if (is_vsi_path(real)) {
    return real;
  }
  return absolute_path(real);
}

std::optional<DirectoryHandle> open_destination_directory(const std::string& path) {
  try {
    return DirectoryHandle::open(dirname_of(path));
  } catch (const UnsafePath& unsafe) {
    throw DestinationRefused(std::string("cannot write ") + path + ": " + unsafe.what());
  }
}

void refuse_if_open_here(const DirectoryHandle& directory, const std::string& name,
                         const std::string& shown) {
  const std::optional<struct stat> there = directory.look(name);
  if (!there || !S_ISREG(there->st_mode)) {
    return;
  }
  const Inode wanted = Inode::of(*there);
  bool found = false;
  for_each_open_descriptor([&](int fd) {
    struct stat info {};
    found = ::fstat(fd, &info) == 0 && S_ISREG(info.st_mode) && Inode::of(info) == wanted;
    return found;
  });
  if (found) {
    throw DestinationRefused(
        shown +
        " is open in this process (a source this work reads, or a dataset not "
        "closed yet): writing over it would replace what is being read with what "
        "is made from it; write the output to another path, or close the dataset "
        "first");
  }
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

std::string describe_foreign_directory(const std::string& path) {
  return path +
         " is a directory that no completion of this ledger recorded there as it is now (a "
         "dataset IDEM did not write, or one changed since): IDEM replaces a directory only "
         "with the work that wrote it, as plain GDAL refuses to write over an existing "
         "dataset; remove it, or write the output to another path";
}

void check_destination(const std::string& path, const DestinationRules& rules,
                       const DirectoryHandle* directory) {
  const std::string real = real_destination(path);
  if (is_vsi_path(real)) {
    refuse_sources(path, real, std::nullopt, rules.source_files);
    return;
  }
  std::optional<DirectoryHandle> opened;
  if (directory == nullptr) {
    opened = open_destination_directory(real);
    if (!opened) {
      return;  // a missing directory: refused when the temporary directory is made
    }
    directory = &*opened;
  }
  const std::string name = basename_of(real);
  const std::optional<struct stat> look = directory->look(name);
  if (look && !S_ISREG(look->st_mode) && !(S_ISDIR(look->st_mode) && rules.directory_dataset)) {
    throw DestinationRefused(describe_not_replaceable(path, look->st_mode));
  }
  const std::optional<Inode> there = look ? std::optional<Inode>(Inode::of(*look)) : std::nullopt;
  const NameSlot slot{directory->identity(), name};
  const LedgerFiles ledger = ledger_files(rules.ledger_dsn);
  for (const auto& [ledger_slot, ledger_path] : ledger.slots) {
    if (ledger_slot == slot) {
      refuse_as_ledger(path, ledger_path);
    }
  }
  for (const auto& [identity, ledger_path] : ledger.files) {
    if (there && identity == *there) {
      refuse_as_ledger(path, ledger_path);
    }
  }
  refuse_sources(path, real, there, rules.source_files);
  if (rules.replaces && there) {
    refuse_if_open_here(*directory, name, path);
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
