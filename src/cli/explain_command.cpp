// SPDX-License-Identifier: MIT
// gdal-idem explain KEY_A KEY_B | --last OUTPUT_URI: why was this tile rebuilt? A field-by-field
// diff of two keys' canonical work descriptions, with readable paths through the VRT tree
// ("vrt.GDALWarpOptions.ResampleAlg: Bilinear -> Cubic"). Key prefixes are accepted when
// unambiguous; --last compares the two most recent keys that wrote an output (history included).
#include <cstdio>
#include <map>
#include <set>

#include "base/canonical_json.hpp"
#include "cli.hpp"
#include "cli_json.hpp"
#include "cli_ledger.hpp"
#include "cli_time.hpp"

namespace idem::cli {

namespace {

constexpr size_t k_shown_value_chars = 160;

struct Difference {
  std::string path;
  const JsonValue* a = nullptr;  // null: absent on that side
  const JsonValue* b = nullptr;
};

std::string shown(const JsonValue* node) {
  if (node == nullptr) {
    return "(absent)";
  }
  std::string text = node->type() == JsonValue::Type::k_string ? node->text() : node->dump();
  if (text.size() > k_shown_value_chars) {
    text = text.substr(0, k_shown_value_chars) + "...";
  }
  return text;
}

std::string join(const std::string& path, const std::string& segment) {
  return path.empty() ? segment : path + "." + segment;
}

bool same(const JsonValue& a, const JsonValue& b) {
  return a.dump() == b.dump();
}

// Named entries of an array: "Tag" (or "Tag[n]" when a tag repeats) for VRT elements, "[i]"
// otherwise, in order.
std::vector<std::pair<std::string, const JsonValue*>> named_items(const JsonValue& array,
                                                                  const JsonValue& other) {
  bool tagged = true;
  for (const JsonValue* side : {&array, &other}) {
    for (const JsonValue& item : side->items()) {
      const JsonValue* tag = item.find("tag");
      tagged = tagged && tag != nullptr && tag->type() == JsonValue::Type::k_string;
    }
  }
  std::vector<std::pair<std::string, const JsonValue*>> named;
  if (!tagged) {
    for (size_t i = 0; i < array.items().size(); ++i) {
      named.emplace_back("[" + std::to_string(i) + "]", &array.items()[i]);
    }
    return named;
  }
  std::map<std::string, int> total;
  for (const JsonValue* side : {&array, &other}) {
    std::map<std::string, int> here;
    for (const JsonValue& item : side->items()) {
      const std::string& tag = item.find("tag")->text();
      total[tag] = std::max(total[tag], ++here[tag]);
    }
  }
  std::map<std::string, int> seen;
  for (const JsonValue& item : array.items()) {
    const std::string& tag = item.find("tag")->text();
    const int index = seen[tag]++;
    named.emplace_back(total[tag] > 1 ? tag + "[" + std::to_string(index) + "]" : tag, &item);
  }
  return named;
}

void diff(const JsonValue* a, const JsonValue* b, const std::string& path,
          std::vector<Difference>& out);

void diff_members(const JsonValue& a, const JsonValue& b, const std::string& path,
                  std::vector<Difference>& out) {
  std::vector<std::string> keys;
  std::set<std::string> known;
  for (const JsonValue* side : {&a, &b}) {
    for (const auto& [key, value] : side->members()) {
      if (known.insert(key).second) {
        keys.push_back(key);
      }
    }
  }
  for (const std::string& key : keys) {
    if (key == "tag") {
      continue;  // the element's name is its path segment
    }
    const JsonValue* left = a.find(key);
    const JsonValue* right = b.find(key);
    std::string child_path;
    if (key == "text") {
      child_path = path.empty() ? "text" : path;
    } else if (key == "children") {
      child_path = path;
    } else if (key == "attr" && ((left && left->type() == JsonValue::Type::k_object) ||
                                 (right && right->type() == JsonValue::Type::k_object))) {
      // Attributes as "path@name".
      const JsonValue empty = JsonValue::object();
      const JsonValue& la = left ? *left : empty;
      const JsonValue& ra = right ? *right : empty;
      std::set<std::string> names;
      for (const JsonValue* side : {&la, &ra}) {
        for (const auto& [name, value] : side->members()) {
          names.insert(name);
        }
      }
      for (const std::string& name : names) {
        diff(la.find(name), ra.find(name), path + "@" + name, out);
      }
      continue;
    } else {
      child_path = join(path, key);
    }
    diff(left, right, child_path, out);
  }
}

void diff(const JsonValue* a, const JsonValue* b, const std::string& path,
          std::vector<Difference>& out) {
  if (a == nullptr || b == nullptr) {
    if (a != b) {
      out.push_back(Difference{path, a, b});
    }
    return;
  }
  if (same(*a, *b)) {
    return;
  }
  if (a->type() == JsonValue::Type::k_object && b->type() == JsonValue::Type::k_object) {
    diff_members(*a, *b, path, out);
    return;
  }
  if (a->type() == JsonValue::Type::k_array && b->type() == JsonValue::Type::k_array) {
    const auto left = named_items(*a, *b);
    const auto right = named_items(*b, *a);
    std::vector<std::string> names;
    std::set<std::string> known;
    for (const auto* side : {&left, &right}) {
      for (const auto& [name, node] : *side) {
        if (known.insert(name).second) {
          names.push_back(name);
        }
      }
    }
    auto lookup = [](const std::vector<std::pair<std::string, const JsonValue*>>& items,
                     const std::string& name) -> const JsonValue* {
      for (const auto& [item_name, node] : items) {
        if (item_name == name) {
          return node;
        }
      }
      return nullptr;
    };
    for (const std::string& name : names) {
      const std::string child = name[0] == '[' ? path + name : join(path, name);
      diff(lookup(left, name), lookup(right, name), child, out);
    }
    return;
  }
  out.push_back(Difference{path, a, b});
}

// The row of a key given in full or as an unambiguous prefix (live table first, else the most
// recent history row).
LedgerRow resolve_key(Ledger& ledger, const std::string& text) {
  if (!is_hex_key_prefix(text)) {
    throw UsageError{"'" + text + "' is not a key (lowercase hex digits, or a prefix of them)"};
  }
  Ledger::RowFilter filter;
  filter.work_key_prefix = text;
  filter.limit = 1000;
  const std::vector<LedgerRow> rows = rows_with_history(ledger, filter);
  std::set<std::string> keys;
  for (const LedgerRow& row : rows) {
    keys.insert(row.work_key);
  }
  if (keys.empty()) {
    throw UsageError{"unknown key '" + text + "': no row in the ledger or its history"};
  }
  if (keys.size() > 1) {
    std::string list;
    for (const std::string& key : keys) {
      list += (list.empty() ? "" : ", ") + key.substr(0, std::max<size_t>(16, text.size() + 4));
      if (list.size() > 200) {
        list += ", ...";
        break;
      }
    }
    throw UsageError{"key prefix '" + text + "' is ambiguous (" + std::to_string(keys.size()) +
                     " keys: " + list + "); give more digits"};
  }
  return rows.front();  // most recent first
}

std::string side_json(const LedgerRow& row) {
  return json::object({{"completed_at", json::time(row.completed_at)},
                       {"key", json::str(row.work_key)},
                       {"namespace", json::str(row.namespace_name)},
                       {"output", json::str(row.output_uri)},
                       {"state", json::str(row_state_name(row))}});
}

}  // namespace

int run_explain(const Args& args, const GlobalOptions& global) {
  constexpr const char* k_synopsis =
      "usage: gdal-idem explain KEY_A KEY_B | gdal-idem explain --last OUTPUT";
  std::vector<std::string> keys;
  std::optional<std::string> last_output;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--last" && i + 1 < args.size()) {
      last_output = args[++i];
    } else if (!args[i].empty() && args[i][0] == '-') {
      throw UsageError{"unknown argument '" + args[i] + "'; " + k_synopsis};
    } else {
      keys.push_back(args[i]);
    }
  }
  if (last_output ? !keys.empty() : keys.size() != 2) {
    throw UsageError{k_synopsis};
  }
  auto ledger = open_ledger_read_only(global);
  LedgerRow a;
  LedgerRow b;
  if (last_output) {
    Ledger::RowFilter filter;
    filter.output_uri = output_uri_argument(*last_output);
    std::vector<LedgerRow> distinct;
    for (LedgerRow& row : rows_with_history(*ledger, filter)) {
      bool seen = false;
      for (const LedgerRow& kept : distinct) {
        seen = seen || kept.work_key == row.work_key;
      }
      if (!seen) {
        distinct.push_back(std::move(row));
      }
    }
    if (distinct.size() < 2) {
      throw UsageError{"the ledger knows " + std::to_string(distinct.size()) + " key(s) for " +
                       *filter.output_uri + "; explain --last needs two"};
    }
    a = std::move(distinct[1]);  // older
    b = std::move(distinct[0]);  // newer
  } else {
    a = resolve_key(*ledger, keys[0]);
    b = resolve_key(*ledger, keys[1]);
  }
  const auto work_a = JsonValue::parse(a.work_json);
  const auto work_b = JsonValue::parse(b.work_json);
  if (!work_a || !work_b) {
    throw UsageError{"the recorded work description of " +
                     (work_a ? b.work_key : a.work_key).substr(0, 12) + " is not JSON"};
  }
  std::vector<Difference> differences;
  const JsonValue ns_a = JsonValue::string(a.namespace_name);
  const JsonValue ns_b = JsonValue::string(b.namespace_name);
  diff(&ns_a, &ns_b, "namespace", differences);
  diff(&*work_a, &*work_b, "", differences);

  if (global.json) {
    std::vector<std::string> items;
    for (const Difference& d : differences) {
      const char* change = d.a == nullptr ? "added" : d.b == nullptr ? "removed" : "changed";
      items.push_back(json::object({{"a", d.a ? d.a->dump() : json::null()},
                                    {"b", d.b ? d.b->dump() : json::null()},
                                    {"change", json::str(change)},
                                    {"path", json::str(d.path)}}));
    }
    std::printf("%s\n", json::object({{"a", side_json(a)},
                                      {"b", side_json(b)},
                                      {"differences", json::array(items)},
                                      {"identical_work", json::boolean(differences.empty())}})
                            .c_str());
    return k_exit_ok;
  }
  std::printf("a: %s  %s  %s%s\n", a.work_key.substr(0, 12).c_str(), row_state_name(a).c_str(),
              a.output_uri.c_str(),
              a.completed_at ? ("  completed " + format_time(*a.completed_at)).c_str() : "");
  std::printf("b: %s  %s  %s%s\n", b.work_key.substr(0, 12).c_str(), row_state_name(b).c_str(),
              b.output_uri.c_str(),
              b.completed_at ? ("  completed " + format_time(*b.completed_at)).c_str() : "");
  if (differences.empty()) {
    std::printf("the work descriptions are identical (the keys differ by algorithm version)\n");
  }
  for (const Difference& d : differences) {
    std::printf("%s: %s -> %s\n", d.path.c_str(), shown(d.a).c_str(), shown(d.b).c_str());
  }
  return k_exit_ok;
}

}  // namespace idem::cli
