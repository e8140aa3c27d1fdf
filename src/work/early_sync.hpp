// SPDX-License-Identifier: MIT
// Early writeback of a large output while GDAL writes it (EarlySync), so that the commit's fsync
// waits for the last pages only.
#pragma once

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace idem {

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
