// SPDX-License-Identifier: MIT
// Helpers shared by the ledger-operation subcommands (status, inflight, reap, verify, explain,
// forget, prune, export): durations, times, a GDAL-style progress bar on stderr, building JSON
// output with sorted keys, reading canonical work JSON, and the target grid it records.
#pragma once

#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cli.hpp"
#include "ledger/ledger.hpp"

namespace idem::cli {

// "90s", "15m", "2h", "7d" or plain seconds ("3600"); throws UsageError naming `option`.
std::chrono::seconds parse_duration(const std::string& text, const std::string& option);

// Seconds since the epoch as "2024-05-01T12:00:00Z" (UTC, whole seconds).
std::string format_time(double epoch_seconds);
// A duration for people: "45s", "12m05s", "3h02m", "2d04h".
std::string format_age(double seconds);

// Ledger to use, opened; k_ledger errors propagate (exit 2).
std::unique_ptr<Ledger> open_ledger(const GlobalOptions& global);
// The same for a command that only reads (invariant I4, Ledger::open_read_only).
std::unique_ptr<Ledger> open_ledger_read_only(const GlobalOptions& global);
// The DSN as shown in messages (password masked).
std::string ledger_label(const GlobalOptions& global);

// A GDAL-style text progress bar ("0...10...20... - done.") on stderr, silent with -q or when
// stderr is not wanted. Usable as a GDALProgressFunc through `callback()`/`data()`.
class Progress {
 public:
  explicit Progress(bool enabled) : m_enabled(enabled) {}
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  void update(double fraction);
  void update(size_t done, size_t total) {
    update(total == 0 ? 1.0 : static_cast<double>(done) / static_cast<double>(total));
  }
  void finish() { update(1.0); }

 private:
  bool m_enabled;
  int m_last_tick = -1;  // ticks of 2.5%, as GDALTermProgress
};

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

// Common members of a row in JSON output: key, namespace, layer, tile, output, state, times,
// worker, attempt, fingerprint.
std::map<std::string, std::string> row_json_members(const LedgerRow& row);
// "completed", "superseded", "in_flight", "stale" (expired or released).
std::string row_state_name(const LedgerRow& row);

// A band of the recorded VRT: GDAL's data type name and its NoDataValue text, when it has one.
struct WorkBand {
  std::string data_type;
  std::optional<std::string> nodata;
};
// The target grid recorded in a canonical work description (its VRT: size, geotransform, SRS,
// bands) and the output's format. Unset fields stay empty.
struct WorkGrid {
  std::string format;  // the output's driver (FORMAT)
  int x_size = 0;
  int y_size = 0;
  std::vector<WorkBand> bands;
  std::optional<std::vector<double>> geotransform;
  std::optional<std::string> srs;  // "EPSG:3857" or a PROJJSON text, as SetFromUserInput takes
};
std::optional<WorkGrid> work_grid(const std::string& work_json);

// Whether `key_text` looks like (a prefix of) a lowercase hex key.
bool is_hex_key_prefix(const std::string& key_text);

}  // namespace idem::cli

namespace idem::cli {

// An output given on the command line as the ledger records it: /vsiidem/ paths mapped to the
// real path, local paths made absolute, other /vsi paths as given.
std::string output_uri_argument(const std::string& text);

// Rows of `filter` in the live table and in history (most recent first by completion or claim).
std::vector<LedgerRow> rows_with_history(Ledger& ledger, const Ledger::RowFilter& filter);

// Rows per ledger query of the commands that page through the ledger (reap, verify):
// IDEM_LEDGER_PAGE_ROWS (config option or environment), default 1000.
int64_t ledger_page_rows();

}  // namespace idem::cli
