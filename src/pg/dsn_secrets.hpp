// SPDX-License-Identifier: MIT
// Passwords a PostgreSQL DSN carries, and messages with them masked: the ledger and feature
// loads never print a password from a DSN, however malformed.
#pragma once

#include <cstddef>
#include <optional>
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

// One keyword = value of a libpq keyword string, read as libpq reads it (conninfo_parse): blanks
// around '=', a value either single-quoted or running to the next blank, a backslash escaping
// the next character in both.
struct ConninfoKeyword {
  size_t name_begin = 0;  // where the name starts in the text
  std::string name;
  std::string value;       // what libpq reads: quotes removed, escapes resolved
  size_t value_begin = 0;  // the value as written, quotes and backslashes included: the text's
  size_t value_end = 0;    // [value_begin, value_end)
};
// The keywords of a libpq keyword string, in order; nullopt when it is not one (a word without
// '=', an empty name, an unclosed quote), as libpq refuses it. The one scanner of keyword strings
// (the ledger's redaction, a load's PG: target); dsn_secrets() looks for passwords without it,
// so that a string this refuses is masked too.
std::optional<std::vector<ConninfoKeyword>> scan_conninfo_keywords(const std::string& text);

}  // namespace idem
