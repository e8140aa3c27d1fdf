// SPDX-License-Identifier: MIT
// The commit protocol: write into a temporary directory beside the final path (same filesystem,
// same basename, so drivers name their sidecars the same), then publish with fsync + rename of
// every file (primary last) + fsync of the directory. Like ccache's AtomicFile: nothing is
// published without an explicit commit(); the destructor cleans up and never publishes.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/object_store.hpp"
#include "base/safe_delete.hpp"

namespace idem {

// Every temporary directory IDEM creates is named "<k_temp_prefix><token>" inside the output's
// directory (for object outputs: inside local_temp_root()); `gdal-idem reap` removes only such
// directories, only when older than the lease.
constexpr const char* k_temp_prefix = ".idem-tmp-";

// A file publish() put in place, as it was just before the rename.
struct PublishedFile {
  std::string path;
  int64_t size = 0;
  int64_t mtime_ns = 0;
};

class AtomicOutput {
 public:
  // `final_path` is the real path of the primary file. `token` makes the temporary directory
  // unique per attempt (the claim token). Creates the temporary directory; throws
  // idem::Error(k_io) naming the directory when it cannot be created (missing, read-only...).
  AtomicOutput(const std::string& final_path, const std::string& token);
  ~AtomicOutput();  // removes the temporary directory and everything in it unless committed
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;

  // Where the driver writes the primary file: <dir>/<k_temp_prefix><token>/<basename>.
  const std::string& temp_path() const { return m_temp_path; }
  const std::string& temp_dir() const { return m_temp_dir; }

  // Publish every file in the temporary directory: fsync each (unless !durable), rename each to
  // the final directory with the primary last, fsync the final directory, remove the temporary
  // directory. Throws idem::Error(k_io) on failure (files not yet renamed are cleaned up).
  // Returns the final paths published, primary last.
  //
  // For an object-store final path (/vsis3/...) the temporary directory is local, under
  // local_temp_root(), and commit uploads every file to the final prefix instead (sidecars
  // first, the primary last; each object appears whole when its upload completes).
  std::vector<std::string> commit(bool durable = true);

  // The fenced form of commit() for local outputs: every file is put in place, but what each
  // replaced is kept (exchanged into the temporary directory) until settle() drops it or
  // roll_back() puts it back, taking out each file of this attempt still at its final path
  // (another worker's file put there meanwhile stays). The destructor rolls back a publish
  // that was not settled. For an object output publish() uploads, as commit() does.
  std::vector<std::string> publish(bool durable = true);
  // Object outputs, before the publish is fenced: looks at each object publish() will upload
  // (a request each) and makes its upload conditional on what it saw (conditional_upload_applies),
  // so that the store refuses it once another writer has changed the object since. publish()
  // then throws UploadRefused; the objects uploaded before the refused one stay, and the
  // temporary files stay for another observe_objects() and publish(). Local outputs: nothing.
  void observe_objects();
  // Before publish() of a local output: files of the output being replaced that a completion
  // recorded and the new output does not have (its sidecars), for the publish to move aside into
  // the temporary directory, after the new sidecars and before the new primary, each only while
  // it is still the file recorded. roll_back() puts them back; settle() drops them. So no
  // member of another work survives beside the new output (invariant I3), however late that
  // work published. A name the new output has is replaced by its own file instead.
  void retire_with_publish(std::vector<KnownFile> files);
  void settle();
  void roll_back() noexcept;
  // What publish() put in place (local outputs), as it was just before: the fingerprint of this
  // attempt's own files, whatever another worker renames there afterwards.
  std::vector<PublishedFile> placed_files() const;
  // Whether every file publish() put in place is still there (same device and inode), i.e. no
  // other worker has renamed its own over it since. Local outputs only (objects: true).
  bool still_in_place() const;

  bool is_object() const { return m_object; }
  // After publish(): whether the primary replaced an output that was there (a local file kept
  // aside, or an object the upload was made conditional on).
  bool replaced_an_output() const;
  // After commit() of an object output: what was uploaded as the primary object.
  const std::optional<CopiedBytes>& uploaded_primary() const { return m_uploaded_primary; }

 private:
  struct Placed {
    std::string temp_path;
    std::string final_path;
    std::string held;  // where the file it replaced is kept ("" for none)
    dev_t device = 0;
    ino_t inode = 0;
    int64_t size = 0;
    int64_t mtime_ns = 0;
  };
  std::vector<std::string> upload(const std::vector<std::string>& ordered);
  // The files of the temporary directory in publishing order: sidecars, then the primary.
  std::vector<std::string> ordered_names() const;
  void place(const std::string& from, const std::string& to);

  struct Retired {
    std::string aside;  // where publish() moved it, in the temporary directory
    std::string final_path;
  };
  void retire(const std::vector<std::string>& placed_names);

  std::vector<Placed> m_placed;
  std::vector<KnownFile> m_to_retire;
  std::vector<Retired> m_retired;
  bool m_durable = true;

  bool m_object = false;
  std::string m_final_path;
  std::string m_temp_dir;
  std::string m_temp_path;
  bool m_committed = false;
  std::optional<CopiedBytes> m_uploaded_primary;
  std::map<std::string, ExpectedObject> m_expected;  // by final object path (observe_objects)
};

// The token of a temporary directory that `owner` (the IDEM driver: the work key's first 16
// digits) marks as its own: "<attempt token>.<owner>"; the attempt token alone without one.
std::string temp_token(const std::string& attempt_token, const std::string& owner);
// The attempt token of a temporary directory's name ("" when not one of IDEM's).
std::string token_of_temp_dir(const std::string& name);
// Removes the temporary directories beside `final_path` (objects: under local_temp_root()) that
// `owner` marked, except `own_temp_dir`: those of earlier attempts at the same work, which a
// worker that took the work over holds the claim of now. Best effort; returns how many.
// An attempt stopped between its publish and its completion left there the files its publish
// replaced: each of them that is one of `recorded` (the files completions recorded at this
// destination) is first put back in place of the file that attempt published, unless what is
// at the path now is itself recorded. So a takeover never destroys the output it would need to
// restore (invariant I3).
int remove_abandoned_temp_dirs(const std::string& final_path, const std::string& owner,
                               const std::string& own_temp_dir,
                               const std::vector<KnownFile>& recorded = {});
// One abandoned attempt's local temporary directory (beside its output, which is in the same
// directory): the files its publish replaced that are among `recorded` are put back first, as
// above, then the directory goes (delete_own_directory). Used by a takeover and by `reap`.
DeleteOutcome remove_abandoned_temp_dir(const std::string& temp_dir,
                                        const std::vector<KnownFile>& recorded);

// fsync a file or directory by path; throws idem::Error(k_io).
void fsync_path(const std::string& path);

// Makes a file durable while it is still being written, so that the fsync before the rename
// waits for the last pages only: a background thread fdatasyncs what has been written so far,
// every `period` while there is nothing to sync and back to back while there is. GDAL keeps a
// warp's output in its block cache and writes all of it when the dataset is closed; the device
// flush of an fsync costs in proportion to the data, even once the pages are written
// (bench/RESULTS.md, section 1a), so without this the whole flush follows the writing instead of
// overlapping it. The commit's own fsync still makes the guarantee; this only does most of its
// work early. A file that does not exist yet is looked for again at the next period.
class EarlySync {
 public:
  // `sync_file` is what is done to the file each time (tests observe it through it).
  explicit EarlySync(std::string path,
                     std::chrono::milliseconds period = std::chrono::milliseconds(50),
                     std::function<int(int)> sync_file = ::fdatasync);
  ~EarlySync();  // stops the thread
  EarlySync(const EarlySync&) = delete;
  EarlySync& operator=(const EarlySync&) = delete;

 private:
  void run();

  std::string m_path;
  std::chrono::milliseconds m_period;
  std::function<int(int)> m_sync_file;
  std::mutex m_mutex;
  std::condition_variable m_wake;
  bool m_stop = false;
  std::thread m_thread;
};

}  // namespace idem
