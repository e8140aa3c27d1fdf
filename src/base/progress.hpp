// SPDX-License-Identifier: MIT
// Progress as GDAL reports it (GDALProgressFunc), relayed to the caller's callback: the one relay
// the driver, the warp and feature loads use.
#pragma once

#include <functional>

#include "gdal.h"

namespace idem {

// Forwards progress to the caller's callback, in [0, 1] and never going backwards (GDAL's warper
// can overshoot 1.0 slightly), and remembers whether the work was stopped, so that a cancellation
// can be told apart from a failure of the inner driver. `check`, when set, runs first at every
// report: false stops the work (it reports why, with CPLError), as a cancellation does.
class ProgressRelay {
 public:
  ProgressRelay(GDALProgressFunc progress, void* progress_data,
                std::function<bool(double)> check = {});

  static int CPL_STDCALL forward(double complete, const char* message, void* self);
  // The relay as a GDALProgressFunc and its data.
  GDALProgressFunc function() const { return forward; }
  void* data() { return this; }

  bool cancelled() const { return m_cancelled; }

 private:
  GDALProgressFunc m_progress;
  void* m_progress_data;
  std::function<bool(double)> m_check;
  double m_reported = 0.0;
  bool m_cancelled = false;
};

// One stage of a relay's progress, [start, end] of the caller's scale.
class ScaledProgress {
 public:
  ScaledProgress(double start, double end, ProgressRelay& relay);
  ~ScaledProgress();
  ScaledProgress(const ScaledProgress&) = delete;
  ScaledProgress& operator=(const ScaledProgress&) = delete;

  GDALProgressFunc function() const { return GDALScaledProgress; }
  void* data() const { return m_data; }

 private:
  void* m_data;
};

}  // namespace idem
