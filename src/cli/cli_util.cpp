// SPDX-License-Identifier: MIT
// Helpers shared by the ledger-operation subcommands: durations, times, progress on stderr,
// JSON output and input, the target grid of a canonical work description.
#include "cli_util.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "base/canonical_json.hpp"
#include "base/error.hpp"
#include "base/paths.hpp"
#include "cpl_conv.h"
#include "cpl_string.h"

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

std::unique_ptr<Ledger> open_ledger(const GlobalOptions& global) {
  return Ledger::open_existing(global.ledger_dsn);
}

std::unique_ptr<Ledger> open_ledger_read_only(const GlobalOptions& global) {
  return Ledger::open_read_only(global.ledger_dsn);
}

std::string ledger_label(const GlobalOptions& global) {
  return global.ledger_dsn.empty() ? "sqlite:" + Ledger::default_sqlite_path()
                                   : Ledger::redact_dsn(global.ledger_dsn);
}

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

namespace json {

std::string str(const std::string& text) {
  return json_quote(text);
}
std::string integer(int64_t value) {
  return std::to_string(value);
}
std::string real(double value) {
  return std::isfinite(value) ? format_double(value) : "null";
}
std::string boolean(bool value) {
  return value ? "true" : "false";
}
std::string null() {
  return "null";
}
std::string time(const std::optional<double>& epoch_seconds) {
  return epoch_seconds ? str(format_time(*epoch_seconds)) : null();
}
std::string object(const std::map<std::string, std::string>& members) {
  std::string out = "{";
  bool first = true;
  for (const auto& [key, value] : members) {
    out += (first ? "" : ",") + json_quote(key) + ":" + value;
    first = false;
  }
  return out + "}";
}
std::string array(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    out += (i ? "," : "") + items[i];
  }
  return out + "]";
}

void write_object_with_array(std::FILE* out, std::map<std::string, std::string> members,
                             const std::string& array_name,
                             const std::function<void(std::FILE*)>& write_items) {
  members[array_name];  // its place among the others
  std::fputc('{', out);
  bool first = true;
  for (const auto& [key, value] : members) {
    const std::string name = (first ? "" : ",") + json_quote(key) + ":";
    std::fwrite(name.data(), 1, name.size(), out);
    if (key == array_name) {
      std::fputc('[', out);
      write_items(out);
      std::fputc(']', out);
    } else {
      std::fwrite(value.data(), 1, value.size(), out);
    }
    first = false;
  }
  std::fputc('}', out);
}

std::string strings(const std::vector<std::string>& texts) {
  std::vector<std::string> items;
  items.reserve(texts.size());
  for (const std::string& text : texts) {
    items.push_back(str(text));
  }
  return array(items);
}

}  // namespace json

std::string row_state_name(const LedgerRow& row) {
  if (row.state == RowState::k_completed) {
    return row.superseded_at ? "superseded" : "completed";
  }
  if (row.released_at) {
    return "released";  // given up (a failure, or `gdal-idem reap`): the next claim takes it
  }
  if (row.lease_left_seconds && *row.lease_left_seconds <= 0) {
    return "stale";  // a killed or stalled worker's: `gdal-idem reap` releases it
  }
  return "in_flight";
}

std::map<std::string, std::string> row_json_members(const LedgerRow& row) {
  std::map<std::string, std::string> members;
  members["key"] = json::str(row.work_key);
  members["namespace"] = json::str(row.namespace_name);
  members["layer"] = row.layer ? json::str(*row.layer) : json::null();
  members["tile"] = row.tile ? json::object({{"x", json::integer(row.tile->x)},
                                             {"y", json::integer(row.tile->y)},
                                             {"z", json::integer(row.tile->z)}})
                             : json::null();
  members["output"] = json::str(row.output_uri);
  members["state"] = json::str(row_state_name(row));
  members["attempt"] = json::integer(row.attempt);
  members["worker"] =
      json::object({{"host", json::str(row.worker_host)}, {"pid", json::integer(row.worker_pid)}});
  members["claimed_at"] = json::time(row.claimed_at);
  members["completed_at"] = json::time(row.completed_at);
  return members;
}

// ---- JSON input ----------------------------------------------------------------------------

namespace {

// The CRS text of a canonical "crs" value: "EPSG:n", {"projjson": "..."}, or either wrapped with
// its data axes.
std::optional<std::string> crs_text(const JsonValue& node) {
  if (node.type() == JsonValue::Type::k_string) {
    return node.text();
  }
  if (node.type() != JsonValue::Type::k_object) {
    return std::nullopt;
  }
  if (const JsonValue* projjson = node.find("projjson")) {
    if (projjson->type() == JsonValue::Type::k_string) {
      return projjson->text();
    }
    return projjson->dump();
  }
  if (const JsonValue* inner = node.find("crs")) {
    return crs_text(*inner);
  }
  return std::nullopt;
}

WorkBand work_band(const JsonValue& band) {
  WorkBand out;
  if (const JsonValue* attributes = band.find("attr")) {
    if (const JsonValue* type = attributes->find("dataType")) {
      out.data_type = type->text();
    }
  }
  if (const JsonValue* children = band.find("children")) {
    for (const JsonValue& child : children->items()) {
      const JsonValue* tag = child.find("tag");
      const JsonValue* text = child.find("text");
      if (tag != nullptr && text != nullptr && tag->text() == "NoDataValue") {
        out.nodata = text->text();
      }
    }
  }
  return out;
}

}  // namespace

std::optional<WorkGrid> work_grid(const std::string& work_json) {
  const auto work = JsonValue::parse(work_json);
  if (!work) {
    return std::nullopt;
  }
  const JsonValue* vrt = work->find("vrt");
  if (vrt == nullptr) {
    return std::nullopt;
  }
  WorkGrid grid;
  if (const JsonValue* format = work->find("format")) {
    grid.format = format->text();
  }
  if (const JsonValue* attributes = vrt->find("attr")) {
    if (const JsonValue* x = attributes->find("rasterXSize")) {
      grid.x_size = std::atoi(x->text().c_str());
    }
    if (const JsonValue* y = attributes->find("rasterYSize")) {
      grid.y_size = std::atoi(y->text().c_str());
    }
  }
  if (const JsonValue* children = vrt->find("children")) {
    for (const JsonValue& child : children->items()) {
      const JsonValue* tag = child.find("tag");
      if (tag == nullptr) {
        continue;
      }
      if (tag->text() == "VRTRasterBand") {
        grid.bands.push_back(work_band(child));
      } else if (tag->text() == "GeoTransform") {
        if (const JsonValue* text = child.find("text")) {
          const CPLStringList parts(CSLTokenizeString2(text->text().c_str(), ", ", 0));
          if (parts.size() == 6) {
            std::vector<double> values;
            values.reserve(6);
            for (int i = 0; i < 6; ++i) {
              values.push_back(CPLAtof(parts[i]));
            }
            grid.geotransform = values;
          }
        }
      } else if (tag->text() == "SRS") {
        if (const JsonValue* crs = child.find("crs")) {
          grid.srs = crs_text(*crs);
        }
      }
    }
  }
  if (grid.x_size <= 0 || grid.y_size <= 0) {
    return std::nullopt;
  }
  return grid;
}

bool is_hex_key_prefix(const std::string& key_text) {
  if (key_text.empty() || key_text.size() > 64) {
    return false;
  }
  for (const char c : key_text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return false;
    }
  }
  return true;
}

}  // namespace idem::cli

namespace idem::cli {

std::string output_uri_argument(const std::string& text) {
  const std::string real = is_vsiidem_path(text) ? vsiidem_real_path(text) : text;
  return is_vsi_path(real) ? real : absolute_path(real);
}

int64_t ledger_page_rows() {
  constexpr int64_t k_default_page_rows = 1000;
  const char* value = CPLGetConfigOption("IDEM_LEDGER_PAGE_ROWS", nullptr);
  const long long rows = value != nullptr ? std::atoll(value) : 0;
  return rows > 0 ? rows : k_default_page_rows;
}

std::vector<LedgerRow> rows_with_history(Ledger& ledger, const Ledger::RowFilter& filter) {
  std::vector<LedgerRow> rows = ledger.rows(filter);
  for (LedgerRow& row : ledger.history(filter)) {
    rows.push_back(std::move(row));
  }
  std::stable_sort(rows.begin(), rows.end(), [](const LedgerRow& a, const LedgerRow& b) {
    return a.completed_at.value_or(a.claimed_at.value_or(0)) >
           b.completed_at.value_or(b.claimed_at.value_or(0));
  });
  return rows;
}

}  // namespace idem::cli
