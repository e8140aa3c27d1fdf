// SPDX-License-Identifier: MIT
// The names of the ledger's rows (labels.hpp).
#include "base/labels.hpp"

#include <cstdio>

#include "base/error.hpp"

namespace idem {

void check_label(const std::string& what, const std::string& value) {
  for (const unsigned char c : value) {
    if (c < 0x20 || c == 0x7f) {
      char code[8];
      std::snprintf(code, sizeof code, "0x%02x", c);
      throw Error(ErrorKind::k_usage,
                  what + " holds a control character (" + code +
                      "): give one line of printable characters (a NUL would be cut, a newline "
                      "would split the ledger's listings)");
    }
  }
  if (value.size() > k_max_label_bytes) {
    throw Error(ErrorKind::k_usage, what + " is " + std::to_string(value.size()) +
                                        " bytes long: give at most " +
                                        std::to_string(k_max_label_bytes));
  }
}

}  // namespace idem
