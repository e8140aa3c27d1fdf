// SPDX-License-Identifier: MIT
// Invariant I2, "IDEM writes only where a new regular file may be written" (docs/concepts.md):
// the one destination check. The IDEM driver, every write, delete and rename through /vsiidem/,
// and every CLI command that writes a file (`export`) ask it before they write; the local
// publisher keeps its last line (nothing but a regular file, or a directory dataset a completion
// recorded there, is ever replaced). Handles, not names: the output's directory is opened once by
// its handle (open_destination_directory), the name is looked at relative to it, and every file
// it must not be (the ledger's, a source's) is compared by device and inode, or by the slot its
// name takes in its directory, never by spelling.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/directory_handle.hpp"

namespace idem {

struct DestinationRules {
  // The ledger in use (a DSN as IDEM_LEDGER takes it; "" for the default SQLite file): its
  // database file and companions (-wal, -shm, -journal), where SQLite itself has them, are
  // refused.
  std::string ledger_dsn;
  // The files the work reads (their paths as GDAL names them: through /vsizip/, /vsitar/,
  // /vsigzip/, /vsisubfile/... too): none of them may be written over.
  std::vector<std::string> source_files;
  // The format writes a directory (Zarr): a directory at the destination is left to the
  // publish, which replaces it only where a completion recorded it.
  bool directory_dataset = false;
  // The write replaces or deletes the file at the destination (not an update in place): refused
  // when this process has that file open (see refuse_if_open_here).
  bool replaces = false;
};

// The real destination of `path`: a /vsiidem/ name's real path, made absolute and lexically
// normalised. Object-store and other /vsi paths are returned as given.
std::string real_destination(const std::string& path);

// The handle of the directory that holds the local destination `path` (a real path), opened as
// DirectoryHandle::open does. Throws DestinationRefused naming the link when a symbolic link on
// the way could have been made by another user; nullopt (errno set) when the directory cannot be
// opened (missing...), which the caller reports when it comes to write.
std::optional<DirectoryHandle> open_destination_directory(const std::string& path);

// Throws DestinationRefused naming what is wrong and what to do when `path` may not be written:
// a link, a device, FIFO or socket, a directory (unless rules.directory_dataset), the ledger's
// database or a companion of it, or one of the sources (a local file under any name, the file
// at the bottom of a /vsizip/ or other chain, an object by its name). `directory` is the handle
// of the directory holding a local `path` (open_destination_directory); when null it is opened
// here. Object-store paths: only the sources are compared.
void check_destination(const std::string& path, const DestinationRules& rules,
                       const DirectoryHandle* directory = nullptr);

// Throws DestinationRefused when a descriptor of this process refers to the regular file `name`
// in `directory` (same device and inode, whatever name or link it was opened by). Used by
// /vsiidem/, which does not know a plain driver's sources: a file this process holds open is one
// it reads, and replacing it would replace a work's input with its own output (GDAL refuses
// `gdal_translate a.tif a.tif`, but cannot see through /vsiidem/). `shown` names it in the
// message. Asked only where an existing file is about to be replaced, so that the cost of a new
// file does not grow with the process's open descriptors.
void refuse_if_open_here(const DirectoryHandle& directory, const std::string& name,
                         const std::string& shown);

// Why the file at `path`, of mode `mode`, cannot be replaced (a link or special file).
std::string describe_not_replaceable(const std::string& path, mode_t mode);
// Why the directory at `path` is not replaced: no completion recorded it there, or it changed
// since.
std::string describe_foreign_directory(const std::string& path);

// Creation options that make a driver update an existing file instead of writing a new one
// (APPEND_SUBDATASET=YES and the like; docs/configuration.md): refused before any claim, since
// IDEM publishes a new file in place of the old one and would drop what the old file held.
void refuse_updating_options(
    const std::vector<std::pair<std::string, std::string>>& creation_options);

}  // namespace idem
