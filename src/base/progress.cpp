// SPDX-License-Identifier: MIT
// The progress relay (progress.hpp).
#include "base/progress.hpp"

#include <algorithm>
#include <utility>

namespace idem {

ProgressRelay::ProgressRelay(GDALProgressFunc progress, void* progress_data,
                             std::function<bool(double)> check)
    : m_progress(progress != nullptr ? progress : GDALDummyProgress),
      m_progress_data(progress_data),
      m_check(std::move(check)) {}

int CPL_STDCALL ProgressRelay::forward(double complete, const char* message, void* self) {
  auto* relay = static_cast<ProgressRelay*>(self);
  if (relay->m_cancelled) {
    return FALSE;
  }
  if (relay->m_check && !relay->m_check(complete)) {
    relay->m_cancelled = true;
    return FALSE;
  }
  relay->m_reported = std::max(relay->m_reported, std::min(std::max(complete, 0.0), 1.0));
  if (!relay->m_progress(relay->m_reported, message, relay->m_progress_data)) {
    relay->m_cancelled = true;
    return FALSE;
  }
  return TRUE;
}

ScaledProgress::ScaledProgress(double start, double end, ProgressRelay& relay)
    : m_data(GDALCreateScaledProgress(start, end, ProgressRelay::forward, &relay)) {}

ScaledProgress::~ScaledProgress() {
  GDALDestroyScaledProgress(m_data);
}

}  // namespace idem
