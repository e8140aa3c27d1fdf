// SPDX-License-Identifier: MIT
// Durations and times (cli_time.hpp).
#include "cli_time.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "cli.hpp"

namespace idem::cli {

std::chrono::seconds parse_duration(const std::string& text, const std::string& option) {
  const std::string hint = option + ": '" + text +
                           "' is not a duration; use a number of seconds or a number followed by "
                           "s, m, h or d (e.g. 90s, 15m, 2h, 7d)";
  if (text.empty()) {
    throw UsageError{hint};
  }
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) {
    ++digits;
  }
  if (digits == 0 || digits > 12 || text.size() - digits > 1) {
    throw UsageError{hint};
  }
  const long long value = std::atoll(text.substr(0, digits).c_str());
  long long unit = 1;
  if (digits < text.size()) {
    switch (text.back()) {
      case 's':
        unit = 1;
        break;
      case 'm':
        unit = 60;
        break;
      case 'h':
        unit = 3600;
        break;
      case 'd':
        unit = 86400;
        break;
      default:
        throw UsageError{hint};
    }
  }
  return std::chrono::seconds(value * unit);
}

std::string format_time(double epoch_seconds) {
  const std::time_t seconds = static_cast<std::time_t>(std::floor(epoch_seconds));
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buffer;
}

std::string format_age(double seconds) {
  const bool negative = seconds < 0;
  long long total = static_cast<long long>(std::llround(std::fabs(seconds)));
  char buffer[48];
  if (total < 60) {
    std::snprintf(buffer, sizeof(buffer), "%llds", total);
  } else if (total < 3600) {
    std::snprintf(buffer, sizeof(buffer), "%lldm%02llds", total / 60, total % 60);
  } else if (total < 86400) {
    std::snprintf(buffer, sizeof(buffer), "%lldh%02lldm", total / 3600, (total % 3600) / 60);
  } else {
    std::snprintf(buffer, sizeof(buffer), "%lldd%02lldh", total / 86400, (total % 86400) / 3600);
  }
  return (negative ? "-" : "") + std::string(buffer);
}

}  // namespace idem::cli
