// SPDX-License-Identifier: MIT
// The fenced publish of a local output (docs/concepts.md): every file of the attempt's temporary
// directory put in place in the output's directory, the primary last, each rename relative to the
// handles of both directories (never by path); what each file replaced is kept (exchanged into
// the temporary directory) until settle() drops it or roll_back() puts it back.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/directory_handle.hpp"
#include "base/safe_delete.hpp"
#include "work/temp_dir.hpp"

namespace idem {

// A file publish() put in place, as it was just before the rename.
struct PublishedFile {
  std::string path;
  int64_t size = 0;
  int64_t mtime_ns = 0;
};

class LocalPublisher {
 public:
  // `directory`: the handle of the output's directory, opened (and checked) before the work;
  // `temp`: the attempt's temporary directory in it; `primary`: the output's file name. Both
  // must outlive the publisher.
  LocalPublisher(const DirectoryHandle& directory, TempDir& temp, std::string primary);

  // Puts every file of the temporary directory in place, sidecars first and the primary last:
  // each synced first (unless !durable), the output's directory checked to be still the one its
  // path leads to (a directory on it moved, or swapped for a link, while the work ran: nothing
  // is published), each file exchanged with the one it replaces, then the directory synced.
  // Returns the final paths, primary last. Throws idem::Error (what was placed is taken back).
  std::vector<std::string> publish(bool durable);
  // Files of the output being replaced that a completion recorded and the new output does not
  // have (its sidecars), moved aside into the temporary directory after the new sidecars and
  // before the new primary, each only while it is still the file recorded: no member of another
  // work survives beside the new output (invariant I3). A name the new output has is replaced
  // by its own file instead.
  void retire_with_publish(std::vector<KnownFile> files);
  // A directory at the destination (a directory dataset, such as Zarr) is replaced only when a
  // completion recorded that directory there and its tree is still the one recorded
  // (`recorded_tree`, tree_sha256 of the completion's members): looked at again just before the
  // exchange, and once more before the directory exchanged out is removed. Anything else is
  // refused, as plain GDAL refuses to write over an existing dataset.
  void allow_replacing_directory(std::string recorded_tree);
  // The publish stands: what the placed files replaced goes, with the temporary directory.
  void settle();
  // What this publish put in place is taken out (each only while it is still the file placed:
  // another worker's file put there meanwhile stays) and what it replaced put back.
  void roll_back() noexcept;

  std::vector<PublishedFile> placed_files() const;
  // Whether every file publish() put in place is still there (same device and inode).
  bool still_in_place() const;
  // After publish(): whether the primary replaced a file that was there.
  bool replaced_an_output() const;

 private:
  struct Placed {
    std::string name;
    std::string held;  // the name, in the temporary directory, of what it replaced ("" none)
    Inode identity;
    int64_t size = 0;
    int64_t mtime_ns = 0;
    bool directory = false;
  };
  struct Retired {
    std::string aside;  // its name in the temporary directory
    std::string name;   // its name in the output's directory
  };

  std::vector<std::string> ordered_names() const;
  void place(const std::string& name);
  void check_replaceable(const std::string& name, const struct stat& ours,
                         const std::optional<struct stat>& there) const;
  void retire(const std::vector<std::string>& placed_names);
  void keep_changed_directory(const Placed& placed);

  const DirectoryHandle& m_directory;
  TempDir& m_temp;
  std::string m_primary;
  std::optional<std::string> m_recorded_tree;
  std::vector<Placed> m_placed;
  std::vector<KnownFile> m_to_retire;
  std::vector<Retired> m_retired;
  bool m_durable = true;
};

}  // namespace idem
