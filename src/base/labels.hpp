// SPDX-License-Identifier: MIT
// The names a user gives the ledger's rows: a namespace, a layer, a tile, a load's table and
// schema. Every place one enters (the driver's creation options and IDEM_NAMESPACE, each
// command's --namespace and --layer, a load's settings, the Python package) asks check_label.
#pragma once

#include <string>

namespace idem {

// The longest name IDEM takes, in bytes.
constexpr size_t k_max_label_bytes = 256;

// Throws idem::Error(k_usage) naming `what` when `value` holds a control character (a NUL, which
// the C strings on the way would cut, a newline, which would split the lines of every listing
// and log, a tab...) or is longer than k_max_label_bytes; says what is allowed.
void check_label(const std::string& what, const std::string& value);

}  // namespace idem
