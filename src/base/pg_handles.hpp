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
using Connection = std::unique_ptr<PGconn, ConnectionCloser>;
using Result = std::unique_ptr<PGresult, ResultClearer>;

// `name` quoted as an SQL identifier by libpq (PQescapeIdentifier); "" when libpq refuses it
// (invalid encoding, out of memory), which callers treat as an error.
inline std::string quote_identifier(PGconn* connection, const std::string& name) {
  std::unique_ptr<char, decltype(&PQfreemem)> quoted(
      PQescapeIdentifier(connection, name.c_str(), name.size()), &PQfreemem);
  return quoted ? std::string(quoted.get()) : std::string();
}

}  // namespace idem::pg
