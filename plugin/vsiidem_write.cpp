// SPDX-License-Identifier: MIT
// The /vsiidem/ write handle (vsiidem_write.hpp).
#include "vsiidem_write.hpp"

#include <unistd.h>

#include <cerrno>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "base/error.hpp"
#include "base/gdal_compat.hpp"
#include "base/paths.hpp"
#include "base/random_token.hpp"
#include "cpl_error.h"
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
    bool last = false;
    bool discard = false;
    {
      VsiIdemState::Locked shared = state().lock();
      last = --m_entry->writers == 0;
      discard = m_entry->discard;
    }
    if (!last) {
      return result;
    }
    const bool durable = durable_writes();
    if (!discard && result == 0 && durable && !m_entry->output->is_object()) {
      // The slow part, outside the lock; commit() re-syncs, which is then cheap.
      m_entry->output->sync_written();
    }
    std::string refused;
    if (!discard && result == 0 && !m_entry->output->is_object()) {
      // Asked again here: a source the driver opened after it created this file (a VRT's,
      // opened at its first read) is open now.
      try {
        refuse_if_open_here(m_entry->output->directory(), basename_of(m_real), m_real);
      } catch (const idem::Error& error) {
        refused = error.what();
      }
    }
    VsiIdemState::Locked shared = state().lock();
    if (m_entry->writers > 0) {
      return result;  // reopened meanwhile: the new last writer publishes
    }
    // No longer in flight (unless reopened as another entry meanwhile).
    auto it = shared.in_flight().find(m_real);
    if (it != shared.in_flight().end() && it->second == m_entry) {
      shared.in_flight().erase(it);
    }
    if (!refused.empty()) {
      m_entry->output.reset();
      shared.keep_dataset_of_refused(m_real);  // what the pre-delete asked to remove stays
      CPLError(CE_Failure, CPLE_NotSupported, "/vsiidem/: %s; it was not published",
               refused.c_str());
      return -1;
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
    const auto pending = shared.pending_unlinks().find(m_real);
    const uint64_t unlink_before =
        pending == shared.pending_unlinks().end() ? 0 : pending->second.number;
    ++shared.publishing()[m_real];
    try {
      shared.unlocked([&] {
        test_pause("vsiidem_publish");
        m_entry->output->commit(durable);
        m_entry->output.reset();
      });
    } catch (...) {
      end_publishing(shared, false, unlink_before);
      throw;
    }
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
  const VsiIdemState::Locked shared = state().lock();
  m_entry->discard = true;  // the last close removes the temporary file and publishes nothing
}
#endif

// After publishing, with the state locked: a file renamed into place replaces what an unlink made
// before the close was going to remove; an unlink made while publishing still happens.
void VsiIdemWriteHandle::end_publishing(VsiIdemState::Locked& shared, bool published,
                                        uint64_t unlink_before) {
  shared.note_change();
  auto publishing = shared.publishing().find(m_real);
  if (publishing != shared.publishing().end() && --publishing->second == 0) {
    shared.publishing().erase(publishing);
  }
  const auto pending = shared.pending_unlinks().find(m_real);
  if (published && pending != shared.pending_unlinks().end()) {
    if (pending->second.number == unlink_before) {
      shared.pending_unlinks().erase(pending);
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
    std::shared_ptr<InFlight> entry;
    std::optional<DirectoryHandle> directory;
    if (!may_write(m_real, false, &directory)) {
      return false;
    }
    {
      VsiIdemState::Locked shared = state().lock();
      entry = shared.live_entry(m_real);
      if (!entry) {
        entry = std::make_shared<InFlight>();
        entry->output =
            std::make_unique<AtomicOutput>(m_real, random_hex(16), std::move(directory));
        copy_published(m_real, *entry->output);
        shared.in_flight()[m_real] = entry;
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
      const VsiIdemState::Locked shared = state().lock();
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
