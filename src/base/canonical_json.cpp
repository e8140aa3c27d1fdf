// SPDX-License-Identifier: MIT
// Canonical JSON: the one serialisation the idempotency key hashes (docs/keys.md).
#include "base/canonical_json.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <system_error>

#include "base/error.hpp"

namespace idem {

JsonValue JsonValue::boolean(bool value) {
  JsonValue result;
  result.m_type = Type::k_bool;
  result.m_scalar = value ? "true" : "false";
  return result;
}

JsonValue JsonValue::number(double value) {
  JsonValue result;
  result.m_type = Type::k_number;
  result.m_scalar = format_double(value);
  return result;
}

JsonValue JsonValue::integer(long long value) {
  JsonValue result;
  result.m_type = Type::k_number;
  result.m_scalar = std::to_string(value);
  return result;
}

JsonValue JsonValue::string(std::string value) {
  JsonValue result;
  result.m_type = Type::k_string;
  result.m_scalar = std::move(value);
  return result;
}

JsonValue JsonValue::array(Array items) {
  JsonValue result;
  result.m_type = Type::k_array;
  result.m_array = std::move(items);
  return result;
}

JsonValue JsonValue::object(Object members) {
  JsonValue result;
  result.m_type = Type::k_object;
  result.m_object = std::move(members);
  return result;
}

JsonValue& JsonValue::set(const std::string& key, JsonValue value) {
  if (m_type != Type::k_object) {
    throw Error(ErrorKind::k_internal,
                "canonical JSON: a member set on a value that is not an object");
  }
  JsonValue& slot = m_object[key];
  slot = std::move(value);
  return slot;
}

const JsonValue* JsonValue::find(const std::string& key) const {
  if (m_type != Type::k_object) {
    return nullptr;
  }
  const auto it = m_object.find(key);
  return it == m_object.end() ? nullptr : &it->second;
}

void JsonValue::push_back(JsonValue value) {
  if (m_type != Type::k_array) {
    throw Error(ErrorKind::k_internal,
                "canonical JSON: an item added to a value that is not an array");
  }
  m_array.push_back(std::move(value));
}

namespace {

void append_escaped(std::string& out, const std::string& text) {
  out += '"';
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (byte < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof(buffer), "\\u%04x", byte);
          out += buffer;
        } else {
          out += c;  // UTF-8 passes through byte for byte
        }
    }
  }
  out += '"';
}

}  // namespace

void JsonValue::dump_to(std::string& out) const {
  switch (m_type) {
    case Type::k_null:
      out += "null";
      break;
    case Type::k_bool:
    case Type::k_number:
      out += m_scalar;
      break;
    case Type::k_string:
      append_escaped(out, m_scalar);
      break;
    case Type::k_array: {
      out += '[';
      bool first = true;
      for (const auto& item : m_array) {
        if (!first) {
          out += ',';
        }
        first = false;
        item.dump_to(out);
      }
      out += ']';
      break;
    }
    case Type::k_object: {
      out += '{';
      bool first = true;
      for (const auto& [key, value] : m_object) {
        if (!first) {
          out += ',';
        }
        first = false;
        append_escaped(out, key);
        out += ':';
        value.dump_to(out);
      }
      out += '}';
      break;
    }
  }
}

std::string JsonValue::dump() const {
  std::string out;
  dump_to(out);
  return out;
}

std::string format_double(double value) {
  if (!std::isfinite(value)) {
    throw Error(ErrorKind::k_internal, "cannot write a non-finite number into canonical JSON");
  }
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  if (result.ec != std::errc()) {
    throw Error(ErrorKind::k_internal, "canonical JSON: a number could not be written");
  }
  return std::string(buffer, result.ptr);
}

std::string trim_space(const std::string& text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) {
    return std::string();
  }
  const auto last = text.find_last_not_of(" \t\r\n");
  return text.substr(first, last - first + 1);
}

namespace {

bool is_integer_literal(const std::string& text) {
  std::size_t i = 0;
  if (i < text.size() && (text[i] == '-' || text[i] == '+')) {
    ++i;
  }
  if (i == text.size()) {
    return false;
  }
  for (; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') {
      return false;
    }
  }
  return true;
}

}  // namespace

bool canonical_number_text(const std::string& raw, std::string& out) {
  const std::string text = trim_space(raw);
  if (text.empty()) {
    return false;
  }
  if (is_integer_literal(text)) {
    // Exact at any width (64-bit nodata values do not survive a double).
    const bool negative = text[0] == '-';
    std::size_t digits = (text[0] == '-' || text[0] == '+') ? 1 : 0;
    while (digits + 1 < text.size() && text[digits] == '0') {
      ++digits;
    }
    const std::string magnitude = text.substr(digits);
    out = (negative && magnitude != "0") ? "-" + magnitude : magnitude;
    return true;
  }
  // from_chars does not take a leading '+'.
  const std::size_t start = text[0] == '+' ? 1 : 0;
  double value = 0;
  const char* begin = text.data() + start;
  const char* end = text.data() + text.size();
  const auto result = std::from_chars(begin, end, value, std::chars_format::general);
  if (result.ec != std::errc() || result.ptr != end) {
    return false;
  }
  if (std::isnan(value)) {
    out = "nan";
  } else if (std::isinf(value)) {
    out = value < 0 ? "-inf" : "inf";
  } else {
    out = format_double(value);
  }
  return true;
}

std::string canonical_scalar_text(const std::string& raw) {
  std::string text = trim_space(raw);
  if (text.empty()) {
    return text;
  }
  std::string result;
  std::size_t position = 0;
  while (true) {
    const auto comma = text.find(',', position);
    const std::string part =
        text.substr(position, comma == std::string::npos ? std::string::npos : comma - position);
    std::string number;
    if (!canonical_number_text(part, number)) {
      return text;  // not a list of numbers: keep as written
    }
    if (!result.empty() || position != 0) {
      result += ',';
    }
    result += number;
    if (comma == std::string::npos) {
      break;
    }
    position = comma + 1;
  }
  return result;
}

// Reads JSON text (RFC 8259) into a JsonValue. Numbers keep their text as written, so a canonical
// document reads back and dumps unchanged; a key given twice keeps its last value.
class JsonParser {
 public:
  explicit JsonParser(const std::string& text) : m_text(text) {}

  bool parse(JsonValue& out) {
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

  bool value(JsonValue& out, int depth) {
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
      out = JsonValue::object();
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
        JsonValue member;
        if (!value(member, depth + 1)) {
          return false;
        }
        out.m_object[std::move(key)] = std::move(member);
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
      out = JsonValue::array();
      skip_space();
      if (m_at < m_text.size() && m_text[m_at] == ']') {
        ++m_at;
        return true;
      }
      while (true) {
        JsonValue item;
        if (!value(item, depth + 1)) {
          return false;
        }
        out.m_array.push_back(std::move(item));
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
      out.m_type = JsonValue::Type::k_string;
      return string(out.m_scalar);
    }
    if (literal("true")) {
      out = JsonValue::boolean(true);
      return true;
    }
    if (literal("false")) {
      out = JsonValue::boolean(false);
      return true;
    }
    if (literal("null")) {
      out = JsonValue();
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
    out.m_type = JsonValue::Type::k_number;
    out.m_scalar = m_text.substr(start, m_at - start);
    return true;
  }

  const std::string& m_text;
  size_t m_at = 0;
};

std::optional<JsonValue> JsonValue::parse(const std::string& text) {
  JsonValue value;
  JsonParser parser(text);
  if (!parser.parse(value)) {
    return std::nullopt;
  }
  return value;
}

}  // namespace idem
