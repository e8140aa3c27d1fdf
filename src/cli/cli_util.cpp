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

void refuse_ledger_as_output(const std::string& output, const GlobalOptions& global) {
  const std::optional<std::string> ledger_path = Ledger::sqlite_path_of(global.ledger_dsn);
  if (!ledger_path) {
    return;
  }
  const std::string ledger = absolute_path(*ledger_path);
  const std::string target = absolute_path(output);
  bool same = false;
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
    const std::string member = ledger + suffix;
    struct stat a {};
    struct stat b {};
    same = same || target == member ||
           (::stat(member.c_str(), &a) == 0 && ::stat(target.c_str(), &b) == 0 &&
            a.st_dev == b.st_dev && a.st_ino == b.st_ino);
  }
  if (same) {
    throw UsageError{output + " is the ledger database itself (" + ledger_label(global) +
                     "); writing there would replace the ledger: choose another file"};
  }
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

}  // namespace json

std::string row_state_name(const LedgerRow& row) {
  if (row.state == RowState::k_completed) {
    return row.superseded_at ? "superseded" : "completed";
  }
  if (row.released_at || (row.lease_left_seconds && *row.lease_left_seconds <= 0)) {
    return "stale";
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

const JsonNode* JsonNode::find(const std::string& key) const {
  for (const auto& [name, value] : members) {
    if (name == key) {
      return &value;
    }
  }
  return nullptr;
}

std::string JsonNode::dump() const {
  switch (type) {
    case Type::k_null:
      return "null";
    case Type::k_bool:
    case Type::k_number:
      return scalar;
    case Type::k_string:
      return json_quote(scalar);
    case Type::k_array: {
      std::vector<std::string> parts;
      for (const auto& item : items) {
        parts.push_back(item.dump());
      }
      return json::array(parts);
    }
    case Type::k_object: {
      std::string out = "{";
      for (size_t i = 0; i < members.size(); ++i) {
        out += (i ? "," : "") + json_quote(members[i].first) + ":" + members[i].second.dump();
      }
      return out + "}";
    }
  }
  return "null";
}

namespace {

class JsonParser {
 public:
  explicit JsonParser(const std::string& text) : m_text(text) {}

  bool parse(JsonNode& out) {
    if (!value(out, 0)) {
      return false;
    }
    skip_space();
    return m_at == m_text.size();
  }

 private:
  static constexpr int k_max_depth = 512;

  void skip_space() {
    while (m_at < m_text.size() && std::isspace(static_cast<unsigned char>(m_text[m_at]))) {
      ++m_at;
    }
  }

  bool literal(const char* word) {
    const std::string text(word);
    if (m_text.compare(m_at, text.size(), text) != 0) {
      return false;
    }
    m_at += text.size();
    return true;
  }

  static void append_utf8(std::string& out, unsigned code) {
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xC0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else if (code < 0x10000) {
      out += static_cast<char>(0xE0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (code >> 18));
      out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    }
  }

  bool hex4(unsigned& code) {
    if (m_at + 4 > m_text.size()) {
      return false;
    }
    code = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = m_text[m_at++];
      code <<= 4;
      if (c >= '0' && c <= '9') {
        code |= unsigned(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        code |= unsigned(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        code |= unsigned(c - 'A' + 10);
      } else {
        return false;
      }
    }
    return true;
  }

  bool string(std::string& out) {
    if (m_at >= m_text.size() || m_text[m_at] != '"') {
      return false;
    }
    ++m_at;
    while (m_at < m_text.size()) {
      const char c = m_text[m_at++];
      if (c == '"') {
        return true;
      }
      if (c != '\\') {
        out += c;
        continue;
      }
      if (m_at >= m_text.size()) {
        return false;
      }
      const char escape = m_text[m_at++];
      switch (escape) {
        case '"':
        case '\\':
        case '/':
          out += escape;
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          unsigned code = 0;
          if (!hex4(code)) {
            return false;
          }
          if (code >= 0xD800 && code < 0xDC00 && m_text.compare(m_at, 2, "\\u") == 0) {
            m_at += 2;
            unsigned low = 0;
            if (!hex4(low)) {
              return false;
            }
            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
          }
          append_utf8(out, code);
          break;
        }
        default:
          return false;
      }
    }
    return false;
  }

  bool value(JsonNode& out, int depth) {
    if (depth > k_max_depth) {
      return false;
    }
    skip_space();
    if (m_at >= m_text.size()) {
      return false;
    }
    const char c = m_text[m_at];
    if (c == '{') {
      ++m_at;
      out.type = JsonNode::Type::k_object;
      skip_space();
      if (m_at < m_text.size() && m_text[m_at] == '}') {
        ++m_at;
        return true;
      }
      while (true) {
        skip_space();
        std::string key;
        if (!string(key)) {
          return false;
        }
        skip_space();
        if (m_at >= m_text.size() || m_text[m_at++] != ':') {
          return false;
        }
        JsonNode member;
        if (!value(member, depth + 1)) {
          return false;
        }
        out.members.emplace_back(std::move(key), std::move(member));
        skip_space();
        if (m_at >= m_text.size()) {
          return false;
        }
        const char next = m_text[m_at++];
        if (next == '}') {
          return true;
        }
        if (next != ',') {
          return false;
        }
      }
    }
    if (c == '[') {
      ++m_at;
      out.type = JsonNode::Type::k_array;
      skip_space();
      if (m_at < m_text.size() && m_text[m_at] == ']') {
        ++m_at;
        return true;
      }
      while (true) {
        JsonNode item;
        if (!value(item, depth + 1)) {
          return false;
        }
        out.items.push_back(std::move(item));
        skip_space();
        if (m_at >= m_text.size()) {
          return false;
        }
        const char next = m_text[m_at++];
        if (next == ']') {
          return true;
        }
        if (next != ',') {
          return false;
        }
      }
    }
    if (c == '"') {
      out.type = JsonNode::Type::k_string;
      return string(out.scalar);
    }
    if (literal("true")) {
      out.type = JsonNode::Type::k_bool;
      out.scalar = "true";
      return true;
    }
    if (literal("false")) {
      out.type = JsonNode::Type::k_bool;
      out.scalar = "false";
      return true;
    }
    if (literal("null")) {
      out.type = JsonNode::Type::k_null;
      return true;
    }
    const size_t start = m_at;
    while (m_at < m_text.size() &&
           (std::isdigit(static_cast<unsigned char>(m_text[m_at])) || m_text[m_at] == '-' ||
            m_text[m_at] == '+' || m_text[m_at] == '.' || m_text[m_at] == 'e' ||
            m_text[m_at] == 'E')) {
      ++m_at;
    }
    if (m_at == start) {
      return false;
    }
    out.type = JsonNode::Type::k_number;
    out.scalar = m_text.substr(start, m_at - start);
    return true;
  }

  const std::string& m_text;
  size_t m_at = 0;
};

// The CRS text of a canonical "crs" value: "EPSG:n", {"projjson": "..."}, or either wrapped with
// its data axes.
std::optional<std::string> crs_text(const JsonNode& node) {
  if (node.type == JsonNode::Type::k_string) {
    return node.scalar;
  }
  if (node.type != JsonNode::Type::k_object) {
    return std::nullopt;
  }
  if (const JsonNode* projjson = node.find("projjson")) {
    if (projjson->type == JsonNode::Type::k_string) {
      return projjson->scalar;
    }
    return projjson->dump();
  }
  if (const JsonNode* inner = node.find("crs")) {
    return crs_text(*inner);
  }
  return std::nullopt;
}

}  // namespace

std::optional<JsonNode> parse_json(const std::string& text) {
  JsonNode node;
  JsonParser parser(text);
  if (!parser.parse(node)) {
    return std::nullopt;
  }
  return node;
}

std::optional<WorkGrid> work_grid(const std::string& work_json) {
  const auto work = parse_json(work_json);
  if (!work) {
    return std::nullopt;
  }
  const JsonNode* vrt = work->find("vrt");
  if (vrt == nullptr) {
    return std::nullopt;
  }
  WorkGrid grid;
  if (const JsonNode* attributes = vrt->find("attr")) {
    if (const JsonNode* x = attributes->find("rasterXSize")) {
      grid.x_size = std::atoi(x->scalar.c_str());
    }
    if (const JsonNode* y = attributes->find("rasterYSize")) {
      grid.y_size = std::atoi(y->scalar.c_str());
    }
  }
  if (const JsonNode* children = vrt->find("children")) {
    for (const JsonNode& child : children->items) {
      const JsonNode* tag = child.find("tag");
      if (tag == nullptr) {
        continue;
      }
      if (tag->scalar == "VRTRasterBand") {
        ++grid.band_count;
      } else if (tag->scalar == "GeoTransform") {
        if (const JsonNode* text = child.find("text")) {
          const CPLStringList parts(CSLTokenizeString2(text->scalar.c_str(), ", ", 0));
          if (parts.size() == 6) {
            std::vector<double> values;
            values.reserve(6);
            for (int i = 0; i < 6; ++i) {
              values.push_back(CPLAtof(parts[i]));
            }
            grid.geotransform = values;
          }
        }
      } else if (tag->scalar == "SRS") {
        if (const JsonNode* crs = child.find("crs")) {
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
