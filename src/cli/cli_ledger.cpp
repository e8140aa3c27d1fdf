// SPDX-License-Identifier: MIT
// How the command reaches the ledger (cli_ledger.hpp).
#include "cli_ledger.hpp"

#include <algorithm>
#include <cstdlib>

#include "base/error.hpp"
#include "base/labels.hpp"
#include "base/paths.hpp"
#include "cpl_conv.h"

namespace idem::cli {

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

std::string label_argument(const std::string& option, const std::string& value) {
  if (value.empty()) {
    throw UsageError{option + " is empty: give a name"};
  }
  try {
    check_label(option, value);
  } catch (const Error& error) {
    throw UsageError{error.what()};
  }
  return value;
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
