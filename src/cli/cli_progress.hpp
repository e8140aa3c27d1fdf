// SPDX-License-Identifier: MIT
// The progress bar of the gdal-idem command's long work, GDAL's own marks on stderr.
#pragma once

#include <cstddef>

namespace idem::cli {

// A GDAL-style text progress bar ("0...10...20... - done.") on stderr, silent with -q or when
// stderr is not wanted. Usable as a GDALProgressFunc through `callback()`/`data()`.
class Progress {
 public:
  explicit Progress(bool enabled) : m_enabled(enabled) {}
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  void update(double fraction);
  void update(size_t done, size_t total) {
    update(total == 0 ? 1.0 : static_cast<double>(done) / static_cast<double>(total));
  }
  void finish() { update(1.0); }

 private:
  bool m_enabled;
  int m_last_tick = -1;  // ticks of 2.5%, as GDALTermProgress
};

}  // namespace idem::cli
