// SPDX-License-Identifier: MIT
// The command's JSON output (cli_json.hpp).
#include "cli_json.hpp"

#include <cmath>

#include "base/canonical_json.hpp"
#include "cli_time.hpp"

namespace idem::cli {

std::string json_quote(const std::string& text) {
  return JsonValue::string(text).dump();
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

}  // namespace idem::cli
