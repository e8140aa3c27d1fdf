// SPDX-License-Identifier: MIT
// Invariant I2, "IDEM writes only where a new regular file may be written" (docs/concepts.md):
// the one destination check. The IDEM driver, every file written through /vsiidem/, and every
// CLI command that writes a file (`export`) ask it before they write; AtomicOutput::place()
// keeps its last line (nothing but a regular file or a directory dataset is ever replaced).
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

namespace idem {

struct DestinationRules {
  // The ledger in use (a DSN as IDEM_LEDGER takes it; "" for the default SQLite file): its
  // database file and companions (-wal, -shm, -journal) are refused.
  std::string ledger_dsn;
  // The files the work reads: none of them may be written over.
  std::vector<std::string> source_files;
  // The format writes a directory (Zarr): a directory at the destination may be replaced.
  bool directory_dataset = false;
  // The write replaces or deletes the file at the destination (not an update in place): refused
  // when this process has that file open (see refuse_if_open_here).
  bool replaces = false;
};

// The real destination of `path`: a /vsiidem/ name's real path, made absolute, with the links of
// its directories resolved but not a link at the name itself (which is refused, not followed).
// Object-store and other /vsi paths are returned as given.
std::string real_destination(const std::string& path);

// Throws Error(k_usage) naming what is wrong and what to do when `path` may not be written:
// a link, a device, FIFO or socket, a directory (unless rules.directory_dataset), the ledger's
// database or a companion of it, or one of the sources. Object-store paths: the ledger check only
// applies to local files, so nothing is refused here.
void check_destination(const std::string& path, const DestinationRules& rules);

// Throws Error(k_usage) when a descriptor of this process refers to the local regular file at
// `path` (same device and inode, whatever name or link it was opened by). Used by /vsiidem/, which
// does not know a plain driver's sources: a file this process holds open is one it reads, and
// replacing it would replace a work's input with its own output (GDAL refuses `gdal_translate
// a.tif a.tif`, but cannot see through /vsiidem/). Object-store and missing paths pass.
void refuse_if_open_here(const std::string& path);

// Why the file at `path`, of mode `mode`, cannot be replaced (a link or special file).
std::string describe_not_replaceable(const std::string& path, mode_t mode);

// Creation options that make a driver update an existing file instead of writing a new one
// (APPEND_SUBDATASET=YES and the like; docs/configuration.md): refused before any claim, since
// IDEM publishes a new file in place of the old one and would drop what the old file held.
void refuse_updating_options(
    const std::vector<std::pair<std::string, std::string>>& creation_options);

}  // namespace idem
