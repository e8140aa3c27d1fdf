// SPDX-License-Identifier: MIT
// Every difference between the GDAL releases gdal-idem builds against (3.6 to 3.13) that the code
// meets, in one place: the other files use the names below and test no GDAL version themselves.
// Each difference is named with the release that brought it; docs/operations.md ("Supported GDAL
// versions") says what they mean for users.
#pragma once

#include <algorithm>
#include <type_traits>
#include <utility>
#include <vector>

#include "cpl_error.h"
#include "gdal_priv.h"
#include "gdal_version.h"
#include "vrtdataset.h"

#define IDEM_GDAL_AT_LEAST(major, minor, revision) \
  (GDAL_VERSION_NUM >= GDAL_COMPUTE_VERSION(major, minor, revision))

#if !IDEM_GDAL_AT_LEAST(3, 6, 0) || IDEM_GDAL_AT_LEAST(3, 14, 0)
#error "gdal-idem builds against GDAL 3.6 to 3.13 (docs/operations.md, Supported GDAL versions)"
#endif

namespace idem::compat {

// The sources of a VRT band: `nSources` and `papoSources` up to 3.10 at least, a vector of
// unique_ptr (`m_papoSources`) by 3.13. Which one this GDAL has is asked of the class itself.
template <typename Band, typename = void>
struct HasSourceVector : std::false_type {};
template <typename Band>
struct HasSourceVector<Band, std::void_t<decltype(std::declval<Band&>().m_papoSources.size())>>
    : std::true_type {};

template <typename Band = VRTSourcedRasterBand>
std::vector<VRTSource*> vrt_band_sources(Band* band) {
  std::vector<VRTSource*> sources;
  if constexpr (HasSourceVector<Band>::value) {
    for (const auto& source : band->m_papoSources) {
      sources.push_back(source.get());
    }
  } else {
    for (int i = 0; i < band->nSources; ++i) {
      sources.push_back(band->papoSources[i]);
    }
  }
  return sources;
}

// GDALDataset::FlushCache returns CPLErr since 3.7 (void before). A proxy's override returns
// `flush_done()` when it has nothing to flush, and the base's result otherwise.
#if IDEM_GDAL_AT_LEAST(3, 7, 0)
using DatasetFlushResult = CPLErr;
inline CPLErr flush_done() {
  return CE_None;
}
#else
using DatasetFlushResult = void;
inline void flush_done() {}
#endif

/************************************************************************/
/*                       Datasets and drivers                           */
/************************************************************************/

// GDALDataset::GetGeoTransform and SetGeoTransform take a GDALGeoTransform since 3.12 (the
// double[6] forms are deprecated there). The code keeps double[6], through these two.
inline CPLErr get_geotransform(GDALDataset* dataset, double geotransform[6]) {
#if IDEM_GDAL_AT_LEAST(3, 12, 0)
  GDALGeoTransform transform;
  const CPLErr result = dataset->GetGeoTransform(transform);
  std::copy(transform.data(), transform.data() + 6, geotransform);
  return result;
#else
  return dataset->GetGeoTransform(geotransform);
#endif
}

inline CPLErr set_geotransform(GDALDataset* dataset, const double geotransform[6]) {
#if IDEM_GDAL_AT_LEAST(3, 12, 0)
  return dataset->SetGeoTransform(GDALGeoTransform(geotransform));
#else
  return dataset->SetGeoTransform(const_cast<double*>(geotransform));
#endif
}

// What GDALMajorObject::GetMetadata returns: CSLConstList since 3.13, char** before.
#if IDEM_GDAL_AT_LEAST(3, 13, 0)
using MetadataList = CSLConstList;
#else
using MetadataList = char**;
#endif

// The options a driver's CreateCopy callback receives: CSLConstList since 3.13, char** before.
#if IDEM_GDAL_AT_LEAST(3, 13, 0)
using CreateCopyOptions = CSLConstList;
#else
using CreateCopyOptions = char**;
#endif

}  // namespace idem::compat

// A proxy dataset's GetGeoTransform override: `CPLErr GetGeoTransform(GDALGeoTransform&) const`
// since 3.12, `CPLErr GetGeoTransform(double*)` before. IDEM_GEOTRANSFORM_OUT_DATA(gt) is the
// double[6] behind the parameter.
#if IDEM_GDAL_AT_LEAST(3, 12, 0)
#define IDEM_GEOTRANSFORM_OVERRIDE_PARAMETERS(gt) GDALGeoTransform& gt
#define IDEM_GEOTRANSFORM_OVERRIDE_CONST const
#define IDEM_GEOTRANSFORM_OUT_DATA(gt) (gt).data()
#else
#define IDEM_GEOTRANSFORM_OVERRIDE_PARAMETERS(gt) double* gt
#define IDEM_GEOTRANSFORM_OVERRIDE_CONST
#define IDEM_GEOTRANSFORM_OUT_DATA(gt) (gt)
#endif

// The creation option that tells GDALDriver::CreateCopy not to delete the target first: spelled
// with a leading '@' since 3.8.2 (a driver no longer warns that it does not know the option).
#if IDEM_GDAL_AT_LEAST(3, 8, 2)
#define IDEM_QUIET_DELETE_ON_CREATE_COPY "@QUIET_DELETE_ON_CREATE_COPY"
#else
#define IDEM_QUIET_DELETE_ON_CREATE_COPY "QUIET_DELETE_ON_CREATE_COPY"
#endif

// gdalwarp's temporary GTiff for a multi-source warp: "<destination>.tmp.tif" up to 3.11.0, a
// CPLGenerateTempFilename() name ("<destination's file name>_<pid>_<counter>") since 3.11.1.
#define IDEM_GDAL_MULTI_SOURCE_TEMP_IS_GENERATED IDEM_GDAL_AT_LEAST(3, 11, 1)

// VRTWarpedDataset keeps its GDALWarpOperation in a private `GDALWarpOperation* m_poWarper` with
// no getter, the same on 3.6.2, 3.10.3 and 3.13.3 (read from their headers); plugin/warp_engine.cpp
// reaches it through an explicit instantiation, which the compiler checks against the header.
#define IDEM_GDAL_HAS_VRT_WARPER_MEMBER 1

// GDALProxyRasterBand::RefUnderlyingRasterBand takes `bool bForceOpen` since 3.7.
#if IDEM_GDAL_AT_LEAST(3, 7, 0)
#define IDEM_REF_UNDERLYING_BAND_PARAMETERS bool /*force_open*/ = true
#else
#define IDEM_REF_UNDERLYING_BAND_PARAMETERS
#endif

/************************************************************************/
/*             The virtual file system handler interface                */
/************************************************************************/
//
// A /vsiidem/ handler overrides VSIFilesystemHandler and VSIVirtualHandle, whose signatures moved
// more than any other part of GDAL between 3.6 and 3.13.

#include <memory>
#include <string>

#include "cpl_vsi_virtual.h"

// CPLDeclareKnownConfigOption (GDAL 3.11 or later): found by CMake in this GDAL's headers, which
// defines IDEM_HAVE_CPL_DECLARE_KNOWN_CONFIG_OPTION.
#ifdef IDEM_HAVE_CPL_DECLARE_KNOWN_CONFIG_OPTION
#define IDEM_GDAL_HAS_DECLARE_KNOWN_CONFIG_OPTION 1
#else
#define IDEM_GDAL_HAS_DECLARE_KNOWN_CONFIG_OPTION 0
#endif

// GDALDataset::Close(GDALProgressFunc, void*), which GDALProxyDataset forwards to the dataset
// behind it (3.13): found by CMake, which defines IDEM_HAVE_GDAL_CLOSE_WITH_PROGRESS.
#ifdef IDEM_HAVE_GDAL_CLOSE_WITH_PROGRESS
#define IDEM_GDAL_PROXY_CLOSE_TAKES_PROGRESS 1
#else
#define IDEM_GDAL_PROXY_CLOSE_TAKES_PROGRESS 0
#endif

// VSIVirtualHandle::AdviseRead (3.7), Error and ClearErr (3.10, pure virtual), CancelCreation
// (3.12; with VSIFilesystemHandler::CreateOnlyVisibleAtCloseTime).
#define IDEM_GDAL_HAS_VSI_ADVISE_READ IDEM_GDAL_AT_LEAST(3, 7, 0)
#define IDEM_GDAL_HAS_VSI_ERROR IDEM_GDAL_AT_LEAST(3, 10, 0)
#define IDEM_GDAL_HAS_VSI_CANCEL_CREATION IDEM_GDAL_AT_LEAST(3, 12, 0)
// VSIFilesystemHandler::ReadDir is pure virtual before 3.7 (ReadDirEx does the work since).
#define IDEM_GDAL_VSI_READDIR_IS_PURE (!IDEM_GDAL_AT_LEAST(3, 7, 0))

// VSIVirtualHandle::Read and Write take a byte count since 3.13 (size and count before). An
// override names its parameters with these, and hands them on with IDEM_VSI_RW_ARGUMENTS.
#if IDEM_GDAL_AT_LEAST(3, 13, 0)
#define IDEM_VSI_RW_PARAMETERS(buffer_type, buffer) buffer_type buffer, size_t idem_bytes_
#define IDEM_VSI_RW_ARGUMENTS(buffer) buffer, idem_bytes_
#else
#define IDEM_VSI_RW_PARAMETERS(buffer_type, buffer) \
  buffer_type buffer, size_t idem_size_, size_t idem_count_
#define IDEM_VSI_RW_ARGUMENTS(buffer) buffer, idem_size_, idem_count_
#endif

// VSIFilesystemHandler::Rename takes a progress callback since 3.11.
#if IDEM_GDAL_AT_LEAST(3, 11, 0)
#define IDEM_VSI_RENAME_EXTRA_PARAMETERS , GDALProgressFunc /*progress*/, void* /*progress_data*/
#else
#define IDEM_VSI_RENAME_EXTRA_PARAMETERS
#endif

// VSIFilesystemHandler::IsLocal is const since 3.12.
#if IDEM_GDAL_AT_LEAST(3, 12, 0)
#define IDEM_VSI_IS_LOCAL_CONST const
#else
#define IDEM_VSI_IS_LOCAL_CONST
#endif

namespace idem::compat {

// VSIFilesystemHandler::Open returns a VSIVirtualHandleUniquePtr since 3.12 (a raw pointer,
// owned by the caller, before). The handler's own code works with raw pointers, and converts at
// the boundary with these two.
#if IDEM_GDAL_AT_LEAST(3, 12, 0)
using VsiOpenResult = VSIVirtualHandleUniquePtr;
inline VsiOpenResult to_open_result(VSIVirtualHandle* handle) {
  return VSIVirtualHandleUniquePtr(handle);
}
inline VSIVirtualHandle* open_handle(VSIFilesystemHandler* handler, const char* path,
                                     const char* access, bool set_error, CSLConstList options) {
  return handler->Open(path, access, set_error, options).release();
}
#else
using VsiOpenResult = VSIVirtualHandle*;
inline VsiOpenResult to_open_result(VSIVirtualHandle* handle) {
  return handle;
}
inline VSIVirtualHandle* open_handle(VSIFilesystemHandler* handler, const char* path,
                                     const char* access, bool set_error, CSLConstList options) {
  return handler->Open(path, access, set_error, options);
}
#endif

// VSIFileManager::InstallHandler takes a shared_ptr since 3.13 (the raw pointer is deprecated).
inline void install_handler(const std::string& prefix, VSIFilesystemHandler* handler) {
#if IDEM_GDAL_AT_LEAST(3, 13, 0)
  VSIFileManager::InstallHandler(prefix, std::shared_ptr<VSIFilesystemHandler>(handler));
#else
  VSIFileManager::InstallHandler(prefix, handler);
#endif
}

}  // namespace idem::compat
