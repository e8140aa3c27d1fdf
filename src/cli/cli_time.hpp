// SPDX-License-Identifier: MIT
// Durations and times as the gdal-idem command reads and prints them.
#pragma once

#include <chrono>
#include <string>

namespace idem::cli {

// "90s", "15m", "2h", "7d" or plain seconds ("3600"); throws UsageError naming `option`.
std::chrono::seconds parse_duration(const std::string& text, const std::string& option);

// Seconds since the epoch as "2024-05-01T12:00:00Z" (UTC, whole seconds).
std::string format_time(double epoch_seconds);
// A duration for people: "45s", "12m05s", "3h02m", "2d04h".
std::string format_age(double seconds);

}  // namespace idem::cli
