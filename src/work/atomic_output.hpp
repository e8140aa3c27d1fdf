// SPDX-License-Identifier: MIT
// The commit protocol: write into a temporary directory beside the final path (same filesystem,
// same basename, so drivers name their sidecars the same), then publish. Like ccache's
// AtomicFile: nothing is published without an explicit commit() or publish(); the destructor
// cleans up and never publishes. The parts: the temporary directory (temp_dir.hpp), the local
// publish (local_publisher.hpp) or the object upload (object_publisher.hpp), chosen once here at
// construction from the final path.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/directory_handle.hpp"
#include "base/safe_delete.hpp"
#include "store/object_store.hpp"
#include "work/local_publisher.hpp"
#include "work/object_publisher.hpp"
#include "work/temp_dir.hpp"

namespace idem {

class AtomicOutput {
 public:
  // `final_path` is the real path of the primary file (local, or an object). `token` makes the
  // temporary directory unique per attempt (the claim token). A local output's temporary
  // directory is made in `directory`, the handle of the output's directory its caller opened and
  // checked (opened here when not given); an object output's in the local temporary root
  // (CPL_TMPDIR), opened here. Throws idem::Error(k_io) naming the directory when the temporary
  // directory cannot be made (missing, read-only...), UnsafePath for a link on its path another
  // user could have made.
  AtomicOutput(const std::string& final_path, const std::string& token,
               std::optional<DirectoryHandle> directory = std::nullopt);
  // Removes the temporary directory and everything in it unless committed; a publish that was
  // not settled is rolled back first.
  ~AtomicOutput();
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;

  // The directory the temporary directory is in: the output's (local), the local temporary
  // root (objects).
  const DirectoryHandle& directory() const { return *m_directory; }
  // Where the driver writes the primary file: a name that reaches it in the temporary directory
  // by that directory's handle (/proc/self/fd/N/<basename>), whatever becomes of the paths above.
  const std::string& temp_path() const { return m_temp_path; }
  // The temporary directory, reached the same way (for a driver's scratch files).
  std::string temp_dir() const { return m_temp->handle().reach_self(); }
  // The temporary directory's name in directory(), and its own handle.
  const std::string& temp_name() const { return m_temp->name(); }
  const DirectoryHandle& temp_handle() const { return m_temp->handle(); }
  // Whether the temporary directory was removed under this attempt (by a worker that took the
  // work over).
  bool temp_dir_removed() const { return !m_temp->still_there(); }
  // fsync of what the driver wrote as the primary (before the publish, outside any lock).
  void sync_written() const;
  // Sets the permission bits of what the driver wrote as the primary (replacing_file_mode).
  void set_written_mode(mode_t mode) const;

  // Publish, then settle (local outputs): see publish().
  std::vector<std::string> commit(bool durable = true);

  // Local outputs: every file of the temporary directory put in place, what each replaced kept
  // until settle() drops it or roll_back() puts it back (LocalPublisher). Objects: uploaded
  // (ObjectPublisher). The final paths, primary last. Throws idem::Error; UploadRefused when a
  // conditional upload was refused.
  std::vector<std::string> publish(bool durable = true);
  // Objects: see ObjectPublisher::observe. Local outputs: nothing.
  void observe_objects();
  // Local outputs: see LocalPublisher::retire_with_publish and allow_replacing_directory.
  void retire_with_publish(std::vector<KnownFile> files);
  void allow_replacing_directory(std::string recorded_tree);
  void settle();
  void roll_back() noexcept;
  // What publish() put in place (local outputs), as it was just before.
  std::vector<PublishedFile> placed_files() const;
  // Whether every file publish() put in place is still there (objects: true).
  bool still_in_place() const;

  bool is_object() const { return m_object != nullptr; }
  // After publish(): whether the primary replaced an output that was there.
  bool replaced_an_output() const;
  // After publish() of an object output: what was uploaded as the primary object.
  const std::optional<CopiedBytes>& uploaded_primary() const;

 private:
  std::optional<DirectoryHandle> m_directory;
  std::unique_ptr<TempDir> m_temp;
  std::string m_temp_path;
  std::unique_ptr<LocalPublisher> m_local;
  std::unique_ptr<ObjectPublisher> m_object;
  bool m_committed = false;
};

}  // namespace idem
