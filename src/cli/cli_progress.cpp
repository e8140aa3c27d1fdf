// SPDX-License-Identifier: MIT
// The progress bar (cli_progress.hpp).
#include "cli_progress.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace idem::cli {

Progress::~Progress() {
  if (m_enabled && m_last_tick >= 0 && m_last_tick < 40) {
    std::fputc('\n', stderr);  // interrupted: end the line
  }
}

void Progress::update(double fraction) {
  if (!m_enabled) {
    return;
  }
  // Same marks as GDALTermProgress ("0...10...20...", " - done."), but on stderr so that
  // stdout stays clean for --json.
  const int tick = static_cast<int>(std::floor(std::max(0.0, std::min(1.0, fraction)) * 40.0));
  while (m_last_tick < tick) {
    ++m_last_tick;
    if (m_last_tick % 4 == 0) {
      std::fprintf(stderr, "%d", (m_last_tick / 4) * 10);
    } else {
      std::fputc('.', stderr);
    }
  }
  if (tick == 40 && m_last_tick == 40) {
    std::fputs(" - done.\n", stderr);
    m_last_tick = 41;
  }
  std::fflush(stderr);
}

}  // namespace idem::cli
