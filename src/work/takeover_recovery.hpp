// SPDX-License-Identifier: MIT
// Takeover recovery: a worker that takes over work, and `gdal-idem reap`, remove the temporary
// directories abandoned attempts left, after putting back what an attempt stopped between its
// publish and its completion had replaced (invariant I3: a takeover never destroys the completed
// output it would need to restore). Everything relative to directory handles.
#pragma once

#include <string>
#include <vector>

#include "base/directory_handle.hpp"
#include "base/safe_delete.hpp"

namespace idem {

// Removes the temporary directories in `directory` (the output's; for an object output the local
// temporary root) that `owner` marked (temp_token), except `own`: those of earlier attempts at
// the same work, whose claim the caller holds now. Before each goes, the files its publish
// replaced that are among `recorded` (the files completions recorded in `directory`) are put
// back in place of the file that attempt published, unless what is there now is itself
// recorded. Best effort; returns how many were removed (deleted, not merely attempted).
int remove_abandoned_temp_dirs(const DirectoryHandle& directory, const std::string& owner,
                               const std::string& own, const std::vector<KnownFile>& recorded = {});

// One abandoned attempt's temporary directory `name` in `directory` (the output's): the files its
// publish replaced that are among `recorded` are put back first, as above, then the directory
// goes (delete_own_directory_at). Used by a takeover and by `reap`.
DeleteOutcome remove_abandoned_temp_dir(const DirectoryHandle& directory, const std::string& name,
                                        const std::vector<KnownFile>& recorded);

}  // namespace idem
