// SPDX-License-Identifier: MIT
// Canonical JSON: the one serialisation the idempotency key hashes (docs/keys.md).
// Objects have sorted keys, there is no whitespace, numbers are written in shortest round-trip
// form, strings are escaped the same way every time.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace idem {

class JsonValue {
 public:
  enum class Type { k_null, k_bool, k_number, k_string, k_array, k_object };
  using Array = std::vector<JsonValue>;
  using Object = std::map<std::string, JsonValue>;  // std::map: keys sorted bytewise

  JsonValue() = default;
  static JsonValue null() { return JsonValue(); }
  static JsonValue boolean(bool value);
  static JsonValue number(double value);  // must be finite; throws idem::Error otherwise
  static JsonValue integer(long long value);
  static JsonValue string(std::string value);
  static JsonValue array(Array items = {});
  static JsonValue object(Object members = {});

  Type type() const { return m_type; }
  bool is_object() const { return m_type == Type::k_object; }
  bool is_array() const { return m_type == Type::k_array; }
  bool is_string() const { return m_type == Type::k_string; }
  const std::string& text() const { return m_scalar; }  // string, or number's canonical text
  Array& items() { return m_array; }
  const Array& items() const { return m_array; }
  Object& members() { return m_object; }
  const Object& members() const { return m_object; }

  // Object access; set() replaces. Throws if not an object.
  JsonValue& set(const std::string& key, JsonValue value);
  const JsonValue* find(const std::string& key) const;
  void push_back(JsonValue value);  // arrays only

  // Sorted keys, no whitespace.
  std::string dump() const;

  // JSON text read back (numbers keep their text as written: a canonical document dumps
  // unchanged); nullopt when the text is not JSON.
  static std::optional<JsonValue> parse(const std::string& text);

 private:
  friend class JsonParser;
  void dump_to(std::string& out) const;

  Type m_type = Type::k_null;
  std::string m_scalar;  // bool ("true"/"false"), number text, string contents
  Array m_array;
  Object m_object;
};

// Shortest decimal text that reads back as exactly `value` (std::to_chars); "-0" keeps its sign.
// Throws idem::Error(k_internal) for NaN and infinities, which JSON cannot carry.
std::string format_double(double value);

// Canonical text of a number written by someone else ("3.3395847237981978e+05" ->
// "333958.47237981978", "007" -> "7"). Integers are kept exact at any width; other numbers go
// through a double. Returns false (and leaves `out` alone) when `text` is not entirely one number.
bool canonical_number_text(const std::string& text, std::string& out);

// `text` without leading and trailing spaces, tabs, CRs and LFs.
std::string trim_space(const std::string& text);

// Canonicalise a comma-separated list of numbers as one string ("1, 2.50" -> "1,2.5"); text that is
// not such a list comes back trimmed but otherwise unchanged.
std::string canonical_scalar_text(const std::string& text);

}  // namespace idem
