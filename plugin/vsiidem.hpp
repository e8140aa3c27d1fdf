// SPDX-License-Identifier: MIT
// The /vsiidem/ virtual filesystem: /vsiidem/<path> maps to <path> (/vsiidem//abs/path for an
// absolute one). Writes by any driver go to a temporary name and are renamed into place on close.
// Unlinks are deferred within the process, so GDAL's pre-delete before CreateCopy
// (docs/internals.md §4) cannot destroy output that IDEM then skips. It is a C++
// VSIFilesystemHandler subclass (docs/internals.md §7).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/paths.hpp"

namespace idem {

// Install the handler (idempotent).
void install_vsiidem_handler();

// The names: k_vsiidem_prefix, is_vsiidem_path, vsiidem_real_path and vsiidem_absolute_path
// (base/paths.hpp). The functions below normalise their argument as vsiidem_absolute_path does,
// so either a /vsiidem/ name or a real path may be passed.

// Deferred unlinks of the real path `real_path` (as recorded, made absolute): whether one is
// pending, and cancelling it (a skip keeps the file). Both take the absolute real path.
bool vsiidem_unlink_pending(const std::string& real_path);
void vsiidem_cancel_unlink(const std::string& real_path);

// GDAL's pre-delete of an IDEM destination (docs/vsiidem.md, "What a deferred delete removes").
// GDAL deletes an existing output before it calls the driver; /vsiidem/ defers those unlinks,
// and the IDEM call they belong to resolves them, never the end of the process:
// - adopt: takes the deferred unlinks of `destination` and of its dataset's other files (same
//   directory, named after its stem and a dot) that this thread made, starting with the
//   destination's own. Returns the adoption's number (0: no unlink of the destination was
//   pending). Adopted unlinks stay hidden and are never carried out by a flush.
// - resolve, not published (skip, failure, dry run): the unlinks are dropped, the files stay as
//   they were. Published (`files`: every file the new output published): the replaced files are
//   gone already; each other adopted file is removed, if it is still the file its unlink saw.
//   Returns the paths that could not be removed.
uint64_t vsiidem_adopt_pre_delete(const std::string& destination);
std::vector<std::string> vsiidem_resolve_pre_delete(uint64_t adoption, bool published,
                                                    const std::vector<std::string>& files = {});

// Called for each deferred unlink that is carried out (at process end or on flush), BEFORE the
// file is removed, and only when the file there is still the one the unlink saw (same device,
// inode, size and mtime; objects: size and Last-Modified); used to invalidate the ledger rows
// whose fingerprint is that file's (ledger row first, then the file). If it throws or returns
// false, the file is kept.
using UnlinkHook = std::function<bool(const std::string& real_path)>;
void vsiidem_set_unlink_hook(UnlinkHook hook);

// Called on the caller's thread before each Stat or Open of a /vsiidem/ path (the driver starts
// opening the ledger at the first: a write through /vsiidem/ is likely coming). Kept by this copy
// of the code: when another copy installed the handler, that copy's hook is called.
void vsiidem_set_use_hook(void (*hook)());

// Carry out every pending unlink now (also runs automatically at process exit: from std::atexit,
// and from the handler's destructor when GDALDestroyDriverManager tears GDAL down). Each pending
// unlink runs at most once. Best called from the IDEM driver's pfnUnloadDriver: GDAL destroys
// drivers before it frees its config options and file manager.
void vsiidem_flush_unlinks();

// The config option IDEM_FSYNC=NO skips the fsync of files and directories when /vsiidem/
// publishes (for tests and scratch data; the rename stays atomic, not durable).

}  // namespace idem
