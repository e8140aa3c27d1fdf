// SPDX-License-Identifier: MIT
// The handle that writes a file through /vsiidem/ (internal to plugin/): it writes the file's
// temporary copy, and the last one of a file to close publishes it.
#pragma once

#include <memory>
#include <string>

#include "base/gdal_compat.hpp"
#include "cpl_vsi_virtual.h"
#include "vsiidem_state.hpp"

namespace idem::vsiidem_detail {

/************************************************************************/
/*                          VsiIdemWriteHandle                          */
/************************************************************************/

// A handle writing the temporary file of an in-flight output; the last one to close publishes.
//
// An update open ("r+") of a published file starts in read-through mode on the file itself and
// copies it to a temporary file only at the first write or truncate: GDAL opens outputs in
// update mode without writing (gdalwarp -overwrite checks the existing output that way), and
// such an open must neither republish the file (new mtime) nor pay for a copy.
class VsiIdemWriteHandle final : public VSIVirtualHandle {
 public:
  VsiIdemWriteHandle(VSIVirtualHandle* inner, std::string real, std::shared_ptr<InFlight> entry)
      : m_inner(inner), m_real(std::move(real)), m_entry(std::move(entry)) {}
  // Read-through until the first write (see above).
  VsiIdemWriteHandle(VSIVirtualHandle* read_only_inner, std::string real)
      : m_inner(read_only_inner), m_real(std::move(real)), m_copy_deferred(true) {}
  ~VsiIdemWriteHandle() override { Close(); }
  VsiIdemWriteHandle(const VsiIdemWriteHandle&) = delete;
  VsiIdemWriteHandle& operator=(const VsiIdemWriteHandle&) = delete;

  int Seek(vsi_l_offset offset, int whence) override { return m_inner->Seek(offset, whence); }
  vsi_l_offset Tell() override { return m_inner->Tell(); }
  size_t Read(IDEM_VSI_RW_PARAMETERS(void*, buffer)) override {
    return m_inner->Read(IDEM_VSI_RW_ARGUMENTS(buffer));
  }
  int ReadMultiRange(int ranges, void** data, const vsi_l_offset* offsets,
                     const size_t* sizes) override {
    return m_inner->ReadMultiRange(ranges, data, offsets, sizes);
  }
  size_t Write(IDEM_VSI_RW_PARAMETERS(const void*, buffer)) override {
    if (m_copy_deferred && !start_copy()) {
      return 0;
    }
    return m_inner->Write(IDEM_VSI_RW_ARGUMENTS(buffer));
  }
  int Eof() override { return m_inner->Eof(); }
  int Flush() override { return m_copy_deferred ? 0 : m_inner->Flush(); }
  int Truncate(vsi_l_offset new_size) override {
    if (m_copy_deferred && !start_copy()) {
      return -1;
    }
    return m_inner->Truncate(new_size);
  }
  void* GetNativeFileDescriptor() override { return m_inner->GetNativeFileDescriptor(); }
  VSIRangeStatus GetRangeStatus(vsi_l_offset offset, vsi_l_offset length) override {
    return m_inner->GetRangeStatus(offset, length);
  }
  bool HasPRead() const override { return m_inner->HasPRead(); }
  size_t PRead(void* buffer, size_t size, vsi_l_offset offset) const override {
    return m_inner->PRead(buffer, size, offset);
  }
#if IDEM_GDAL_HAS_VSI_ADVISE_READ
  void AdviseRead(int ranges, const vsi_l_offset* offsets, const size_t* sizes) override {
    m_inner->AdviseRead(ranges, offsets, sizes);
  }
#endif
#if IDEM_GDAL_HAS_VSI_ERROR
  int Error() override {
    return m_inner->Error();
  }
  void ClearErr() override {
    m_inner->ClearErr();
  }
#endif
#if IDEM_GDAL_HAS_VSI_CANCEL_CREATION
  // A driver whose write failed asks for the file not to be created: it is never published.
  void CancelCreation() override;
#endif

  int Close() override;

 private:
  bool start_copy();
  void end_publishing(VsiIdemState::Locked& shared, bool published, uint64_t unlink_before);

  VSIVirtualHandle* m_inner;
  std::string m_real;
  std::shared_ptr<InFlight> m_entry;
  bool m_copy_deferred = false;
  bool m_closed = false;
};

}  // namespace idem::vsiidem_detail
