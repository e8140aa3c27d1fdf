// SPDX-License-Identifier: MIT
// A feature load's session on its target database (work/feature_load.cpp): one libpq connection,
// every statement parameterised, every message without the password.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "key/feature_key.hpp"
#include "pg/pg_handles.hpp"

namespace idem {

using Params = std::vector<std::optional<std::string>>;

class TargetSession {
 public:
  // Connects to `target` (which must outlive the session). Throws idem::Error(k_io) naming the
  // target, its password masked, when it cannot.
  explicit TargetSession(const FeatureTarget& target);

  PGconn* get() const { return m_connection.get(); }
  // (Re)connects; throws as the constructor does.
  void connect();
  bool ok() const;

  // `sql` run with `params`; throws idem::Error(k_io) naming `what` and the server's message,
  // its password masked, when the server refuses it.
  pg::Result exec(const std::string& sql, const Params& params, const std::string& what);
  // The first column of the first row of `sql`'s answer ("" for none or NULL).
  std::string value(const std::string& sql, const Params& params, const std::string& what);
  // `name` quoted as an identifier (PQescapeIdentifier); throws idem::Error(k_usage) when it
  // cannot be one.
  std::string ident(const std::string& name);
  // `message` with the target's secrets masked.
  std::string scrub(const std::string& message) const;

 private:
  std::string connection_message() const;

  const FeatureTarget& m_target;
  std::vector<std::string> m_secrets;
  pg::Connection m_connection;
};

// The schema `target`'s server resolves for its connection (current_schema(): the search_path
// of the DSN's options, PGOPTIONS or the role's default; "" when it names none that exists), on
// a connection of its own. FeatureLoadSettings::current_schema for `load` and `key`.
std::string ask_current_schema(const FeatureTarget& target);

}  // namespace idem
