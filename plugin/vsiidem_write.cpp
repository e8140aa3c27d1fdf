// SPDX-License-Identifier: MIT
// The /vsiidem/ write handle (vsiidem_write.hpp).
#include "vsiidem_write.hpp"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "base/gdal_compat.hpp"
#include "base/object_store.hpp"
#include "base/paths.hpp"
#include "cpl_conv.h"
#include "cpl_error.h"
#include "cpl_string.h"
#include "cpl_vsi.h"
#include "cpl_vsi_error.h"
#include "cpl_vsi_virtual.h"
#include "gdal_version.h"
#include "work/atomic_output.hpp"
#include "work/destination_guard.hpp"
#include "work/lease.hpp"

namespace idem::vsiidem_detail {

int VsiIdemWriteHandle::Close() {
  if (m_closed) {
    return 0;
  }
  m_closed = true;
  int result = m_inner->Close();
  delete m_inner;
  m_inner = nullptr;
  if (m_copy_deferred) {
    return result;  // never written: the published file is untouched
  }
  try {
    auto& shared = state();
    bool last = false;
    bool discard = false;
    {
      std::lock_guard<std::mutex> lock(shared.m_mutex);
      last = --m_entry->writers == 0;
      discard = m_entry->discard;
    }
    if (!last) {
      return result;
    }
    const bool durable = durable_writes();
    if (!discard && result == 0 && durable && !m_entry->output->is_object()) {
      // The slow part, outside the lock; commit() re-syncs, which is then cheap.
      fsync_path(m_entry->output->temp_path());
    }
    std::string refused;
    if (!discard && result == 0 && !m_entry->output->is_object()) {
      // Asked again here: a source the driver opened after it created this file (a VRT's,
      // opened at its first read) is open now.
      try {
        refuse_if_open_here(m_real);
      } catch (const idem::Error& error) {
        refused = error.what();
      }
    }
    std::unique_lock<std::mutex> lock(shared.m_mutex);
    if (m_entry->writers > 0) {
      return result;  // reopened meanwhile: the new last writer publishes
    }
    if (!refused.empty()) {
      auto it = shared.m_in_flight.find(m_real);
      if (it != shared.m_in_flight.end() && it->second == m_entry) {
        shared.m_in_flight.erase(it);
      }
      m_entry->output.reset();
      shared.keep_dataset_of_refused(m_real);  // what the pre-delete asked to remove stays
      CPLError(CE_Failure, CPLE_NotSupported, "/vsiidem/: %s; it was not published",
               refused.c_str());
      return -1;
    }
    auto it = shared.m_in_flight.find(m_real);
    if (it != shared.m_in_flight.end() && it->second == m_entry) {
      shared.m_in_flight.erase(it);
    }
    if (m_entry->discard) {
      CPLDebug(k_debug_category, "discarded %s (unlinked while open)", m_real.c_str());
      m_entry->output.reset();
      return result;
    }
    if (result != 0) {
      CPLError(CE_Failure, CPLE_FileIO,
               "/vsiidem/: closing the temporary file of %s failed; it was not published",
               m_real.c_str());
      m_entry->output.reset();
      return result;
    }
    // Publish without the lock. Meanwhile the path shows what it showed before this close
    // (the previous file, or nothing while an unlink is pending), and a rename of it is refused.
    const auto pending = shared.m_pending_unlinks.find(m_real);
    const uint64_t unlink_before =
        pending == shared.m_pending_unlinks.end() ? 0 : pending->second.number;
    ++shared.m_publishing[m_real];
    lock.unlock();
    try {
      test_pause("vsiidem_publish");
      m_entry->output->commit(durable);
    } catch (...) {
      lock.lock();
      end_publishing(shared, false, unlink_before);
      throw;
    }
    m_entry->output.reset();
    lock.lock();
    end_publishing(shared, true, unlink_before);
    CPLDebug(k_debug_category, "published %s", m_real.c_str());
  } catch (const std::exception& error) {
    CPLError(CE_Failure, CPLE_FileIO, "/vsiidem/: %s", error.what());
    return -1;
  }
  return result;
}

#if IDEM_GDAL_HAS_VSI_CANCEL_CREATION
void VsiIdemWriteHandle::CancelCreation() {
  if (m_copy_deferred || !m_entry) {
    return;  // nothing written yet: the file in place stays as it is
  }
  auto& shared = state();
  std::lock_guard<std::mutex> lock(shared.m_mutex);
  m_entry->discard = true;  // the last close removes the temporary file and publishes nothing
}
#endif

// After publishing (caller holds m_mutex): a file renamed into place replaces what an unlink made
// before the close was going to remove; an unlink made while publishing still happens.
void VsiIdemWriteHandle::end_publishing(VsiIdemState& shared, bool published,
                                        uint64_t unlink_before) {
  ++shared.m_changes;
  auto publishing = shared.m_publishing.find(m_real);
  if (publishing != shared.m_publishing.end() && --publishing->second == 0) {
    shared.m_publishing.erase(publishing);
  }
  const auto pending = shared.m_pending_unlinks.find(m_real);
  if (published && pending != shared.m_pending_unlinks.end()) {
    if (pending->second.number == unlink_before) {
      shared.m_pending_unlinks.erase(pending);
    } else if (!pending->second.observed) {
      // Unlinked while this close published: what it removes is the file just published.
      pending->second.observed = current_identity(m_real);
    }
  }
}

// First write of an update open: continue on a temporary copy (shared with any handle already
// writing that path), at the same offset.
bool VsiIdemWriteHandle::start_copy() {
  try {
    const vsi_l_offset offset = m_inner->Tell();
    auto& shared = state();
    std::shared_ptr<InFlight> entry;
    {
      std::lock_guard<std::mutex> lock(shared.m_mutex);
      entry = shared.live_entry(m_real);
      if (!entry) {
        entry = std::make_shared<InFlight>();
        entry->output = std::make_unique<AtomicOutput>(m_real, random_token());
        copy_published(m_real, entry->output->temp_path());
        shared.m_in_flight[m_real] = entry;
        CPLDebug(k_debug_category, "writing %s through %s", m_real.c_str(),
                 entry->output->temp_path().c_str());
      }
      ++entry->writers;
    }
    const std::string& temp = entry->output->temp_path();
    VSIVirtualHandle* copy =
        compat::open_handle(handler_for(temp), temp.c_str(), "r+b", TRUE, nullptr);
    if (copy == nullptr || copy->Seek(offset, SEEK_SET) != 0) {
      delete copy;
      std::lock_guard<std::mutex> lock(shared.m_mutex);
      --entry->writers;
      errno = EIO;
      return false;
    }
    m_inner->Close();
    delete m_inner;
    m_inner = copy;
    m_entry = std::move(entry);
    m_copy_deferred = false;
    return true;
  } catch (const std::exception& error) {
    CPLError(CE_Failure, CPLE_FileIO, "/vsiidem/: %s", error.what());
    errno = EIO;
    return false;
  }
}

}  // namespace idem::vsiidem_detail
