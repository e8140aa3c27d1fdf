// SPDX-License-Identifier: MIT
// Early writeback of a large output (early_sync.hpp).
#include "work/early_sync.hpp"

#include <fcntl.h>

#include <utility>

namespace idem {

EarlySync::EarlySync(std::string path, std::chrono::milliseconds period,
                     std::function<int(int)> sync_file)
    : m_path(std::move(path)),
      m_period(period),
      m_sync_file(std::move(sync_file)),
      m_thread([this] { run(); }) {}

EarlySync::~EarlySync() {
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_stop = true;
  }
  m_wake.notify_all();
  m_thread.join();
}

void EarlySync::run() {
  int fd = -1;
  std::chrono::milliseconds wait = m_period;
  std::unique_lock<std::mutex> lock(m_mutex);
  while (!m_wake.wait_for(lock, wait, [this] { return m_stop; })) {
    if (fd < 0) {
      fd = ::open(m_path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    }
    wait = m_period;
    if (fd >= 0) {
      lock.unlock();  // the destructor must not wait for the lock while this syncs
      const auto started = std::chrono::steady_clock::now();
      m_sync_file(fd);
      // A sync that had data to write is followed by the next one at once: while GDAL writes
      // faster than the disk takes it, the syncs run back to back and the last one (the
      // commit's) finds little left.
      if (std::chrono::steady_clock::now() - started > std::chrono::milliseconds(2)) {
        wait = std::chrono::milliseconds(0);
      }
      lock.lock();
    }
  }
  if (fd >= 0) {
    ::close(fd);
  }
}

}  // namespace idem
