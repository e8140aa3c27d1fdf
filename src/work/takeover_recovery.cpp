// SPDX-License-Identifier: MIT
// Takeover recovery (takeover_recovery.hpp).
#include "work/takeover_recovery.hpp"

#include <stdio.h>

#include <optional>

#include "base/paths.hpp"
#include "work/temp_dir.hpp"

namespace idem {

namespace {

// A recorded sidecar of the replaced output, moved into the temporary directory by a publish.
constexpr const char* k_retired_prefix = ".retired.";

// Whether `name` in `directory` is now one of the `recorded` files.
bool is_recorded(const DirectoryHandle& directory, const std::string& name,
                 const std::vector<KnownFile>& recorded) {
  const std::string path = directory.name_path(name);
  for (const KnownFile& file : recorded) {
    if (file.path == path && is_known_file_at(directory, name, file)) {
      return true;
    }
  }
  return false;
}

// The files an abandoned attempt's publish exchanged out of `directory` and kept in `abandoned`,
// put back where they were when a completion recorded them and what is there now was not
// recorded.
void restore_replaced(const DirectoryHandle& directory, const DirectoryHandle& abandoned,
                      const std::vector<KnownFile>& recorded) {
  if (recorded.empty()) {
    return;
  }
  const std::string retired_prefix = k_retired_prefix;
  for (const std::string& entry : abandoned.entries().value_or(std::vector<std::string>())) {
    // A sidecar the publish moved aside (retire) or exchanged out (place).
    const std::string name =
        entry.rfind(retired_prefix, 0) == 0 ? entry.substr(retired_prefix.size()) : entry;
    const std::string final_path = directory.name_path(name);
    bool was_recorded = false;
    for (const KnownFile& file : recorded) {
      was_recorded =
          was_recorded || (file.path == final_path && is_known_file_at(abandoned, entry, file));
    }
    if (!was_recorded || is_recorded(directory, name, recorded)) {
      continue;
    }
    if (::renameat2(abandoned.fd(), entry.c_str(), directory.fd(), name.c_str(), RENAME_EXCHANGE) !=
        0) {
      ::renameat2(abandoned.fd(), entry.c_str(), directory.fd(), name.c_str(), RENAME_NOREPLACE);
    }
  }
}

}  // namespace

int remove_abandoned_temp_dirs(const DirectoryHandle& directory, const std::string& owner,
                               const std::string& own, const std::vector<KnownFile>& recorded) {
  if (owner.empty()) {
    return 0;
  }
  const std::string prefix = k_temp_prefix;
  const std::string suffix = "." + owner;
  int removed = 0;
  for (const std::string& name : directory.entries().value_or(std::vector<std::string>())) {
    if (name != own && name.rfind(prefix, 0) == 0 && name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
        remove_abandoned_temp_dir(directory, name, recorded) == DeleteOutcome::k_deleted) {
      ++removed;
    }
  }
  return removed;
}

DeleteOutcome remove_abandoned_temp_dir(const DirectoryHandle& directory, const std::string& name,
                                        const std::vector<KnownFile>& recorded) {
  if (const std::optional<DirectoryHandle> abandoned = directory.child(name)) {
    restore_replaced(directory, *abandoned, recorded);
  }
  return delete_own_directory_at(directory, name);
}

}  // namespace idem
