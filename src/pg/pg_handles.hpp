// SPDX-License-Identifier: MIT
// Owning wrappers for libpq handles and identifier quoting, shared by the PostgreSQL ledger and
// the feature loader (src/work/feature_load.cpp), so every PGconn/PGresult is released by RAII.
#pragma once

#include <libpq-fe.h>

#include <memory>
#include <string>

namespace idem::pg {

struct ConnectionCloser {
  void operator()(PGconn* connection) const { PQfinish(connection); }
};
struct ResultClearer {
  void operator()(PGresult* result) const { PQclear(result); }
};
struct ConninfoFreer {
  void operator()(PQconninfoOption* options) const { PQconninfoFree(options); }
};
using Connection = std::unique_ptr<PGconn, ConnectionCloser>;
using Result = std::unique_ptr<PGresult, ResultClearer>;
using ConninfoOptions = std::unique_ptr<PQconninfoOption, ConninfoFreer>;

// `dsn` (a URI or keyword string) parsed by libpq (PQconninfoParse): its options, or null when
// it does not parse, with libpq's reason in `reason` (trailing blanks trimmed) when asked for.
inline ConninfoOptions parse_conninfo(const std::string& dsn, std::string* reason = nullptr) {
  char* error = nullptr;
  ConninfoOptions options(PQconninfoParse(dsn.c_str(), &error));
  if (reason != nullptr) {
    *reason = error != nullptr ? error : (options ? "" : "invalid");
    while (!reason->empty() && (reason->back() == '\n' || reason->back() == ' ')) {
      reason->pop_back();
    }
  }
  PQfreemem(error);
  return options;
}

// `name` quoted as an SQL identifier by libpq (PQescapeIdentifier); "" when libpq refuses it
// (invalid encoding, out of memory), which callers treat as an error.
inline std::string quote_identifier(PGconn* connection, const std::string& name) {
  std::unique_ptr<char, decltype(&PQfreemem)> quoted(
      PQescapeIdentifier(connection, name.c_str(), name.size()), &PQfreemem);
  return quoted ? std::string(quoted.get()) : std::string();
}

}  // namespace idem::pg
