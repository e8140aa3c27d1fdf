// SPDX-License-Identifier: MIT
// The gdal-idem command's JSON output (--json): one document, keys sorted, members assembled
// from values already serialised (an answer too long to hold in memory streams its one array:
// write_object_with_array). Strings are escaped by the canonical JSON writer of base/
// (JsonValue), the one escaping of the tree.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ledger/ledger.hpp"

namespace idem::cli {

// A JSON string literal of `text`, escaped.
std::string json_quote(const std::string& text);

// JSON output with keys sorted (std::map) and values already serialised.
namespace json {
std::string str(const std::string& text);
std::string integer(int64_t value);
std::string real(double value);
std::string boolean(bool value);
std::string null();
template <class T, class F>
std::string optional(const std::optional<T>& value, F serialise) {
  return value ? serialise(*value) : null();
}
std::string time(const std::optional<double>& epoch_seconds);  // ISO string or null
std::string object(const std::map<std::string, std::string>& members);
std::string array(const std::vector<std::string>& items);
std::string strings(const std::vector<std::string>& texts);  // an array of JSON strings
// Writes to `out` the object of `members` plus one array member, `array_name`, in object()'s
// order, whose items `write_items` writes there itself (serialised and comma-separated): for an
// array too long to hold in memory (verify's failures).
void write_object_with_array(std::FILE* out, std::map<std::string, std::string> members,
                             const std::string& array_name,
                             const std::function<void(std::FILE*)>& write_items);
}  // namespace json

// The members of a row every command's JSON output shares: key, namespace, layer, tile (x, y, z),
// output, state (row_state_name), attempt, worker (host, pid), claimed_at and completed_at.
std::map<std::string, std::string> row_json_members(const LedgerRow& row);
// "completed", "superseded" (a later key wrote the same output), "released" (given back by a
// failed attempt or `gdal-idem reap`), "stale" (its lease expired while its worker held it) or
// "in_flight".
std::string row_state_name(const LedgerRow& row);

}  // namespace idem::cli
