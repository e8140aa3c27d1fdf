// Canonical JSON: the one serialisation the idempotency key hashes (docs/keys.md).
#include "base/canonical_json.hpp"

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
    throw Error(ErrorKind::k_internal, "JsonValue::set on a non-object");
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
    throw Error(ErrorKind::k_internal, "JsonValue::push_back on a non-array");
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
    throw Error(ErrorKind::k_internal, "std::to_chars failed");
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

}  // namespace idem
