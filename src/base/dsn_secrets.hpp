// SPDX-License-Identifier: MIT
// Passwords a PostgreSQL DSN carries, and messages with them masked: the ledger and feature
// loads never print a password from a DSN, however malformed.
#pragma once

#include <string>
#include <vector>

namespace idem {

// `message` with every occurrence of `secret` masked (no-op for an empty secret).
std::string scrub_secret(std::string message, const std::string& secret);
// Every password a DSN may carry, in each form a message can quote it in (as written, unquoted,
// unescaped, percent-decoded), found without libpq: a DSN libpq cannot parse is covered too
// (URI user info, `password=` in keyword strings and URI queries, quoted or not).
std::vector<std::string> dsn_secrets(const std::string& dsn);
std::string scrub_secrets(std::string message, const std::vector<std::string>& secrets);

}  // namespace idem
