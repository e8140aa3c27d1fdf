// SPDX-License-Identifier: MIT
// A feature load's session on its target database (target_session.hpp).
#include "work/target_session.hpp"

#include <libpq-fe.h>

#include "base/error.hpp"
#include "pg/dsn_secrets.hpp"

namespace idem {

namespace {

std::string one_line(std::string message) {
  for (char& c : message) {
    if (c == '\n' || c == '\t' || c == '\r') {
      c = ' ';
    }
  }
  while (!message.empty() && message.back() == ' ') {
    message.pop_back();
  }
  return message;
}

}  // namespace

TargetSession::TargetSession(const FeatureTarget& target) : m_target(target) {
  m_secrets = dsn_secrets(target.conninfo);
  connect();
}

void TargetSession::connect() {
  const char* keywords[] = {"application_name", "connect_timeout", "dbname", nullptr};
  const char* values[] = {"gdal-idem load", "10", m_target.conninfo.c_str(), nullptr};
  m_connection.reset(PQconnectdbParams(keywords, values, 1));
  if (!m_connection || PQstatus(m_connection.get()) != CONNECTION_OK) {
    throw Error(ErrorKind::k_io, scrub("cannot connect to the target " + m_target.display + ": " +
                                       connection_message()));
  }
  exec("SET client_min_messages = warning", {}, "setting up the session");
}

bool TargetSession::ok() const {
  return m_connection && PQstatus(m_connection.get()) == CONNECTION_OK;
}

pg::Result TargetSession::exec(const std::string& sql, const Params& params,
                               const std::string& what) {
  std::vector<const char*> raw;
  for (const auto& param : params) {
    raw.push_back(param ? param->c_str() : nullptr);
  }
  pg::Result result(PQexecParams(m_connection.get(), sql.c_str(), static_cast<int>(raw.size()),
                                 nullptr, raw.data(), nullptr, nullptr, 0));
  const ExecStatusType status = result ? PQresultStatus(result.get()) : PGRES_FATAL_ERROR;
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    std::string message = result ? PQresultErrorMessage(result.get()) : connection_message();
    if (message.empty()) {
      message = connection_message();
    }
    throw Error(ErrorKind::k_io,
                scrub(what + " failed on " + m_target.display + ": " + one_line(message)));
  }
  return result;
}

std::string TargetSession::value(const std::string& sql, const Params& params,
                                 const std::string& what) {
  pg::Result result = exec(sql, params, what);
  if (PQntuples(result.get()) < 1 || PQgetisnull(result.get(), 0, 0)) {
    return std::string();
  }
  return PQgetvalue(result.get(), 0, 0);
}

std::string TargetSession::ident(const std::string& name) {
  std::string quoted = pg::quote_identifier(m_connection.get(), name);
  if (quoted.empty()) {
    throw Error(ErrorKind::k_usage, "the name '" + name + "' cannot be used as an identifier");
  }
  return quoted;
}

std::string TargetSession::scrub(const std::string& message) const {
  return scrub_secrets(message, m_secrets);
}

std::string TargetSession::connection_message() const {
  return one_line(m_connection ? PQerrorMessage(m_connection.get()) : "out of memory");
}

std::string ask_current_schema(const FeatureTarget& target) {
  TargetSession session(target);
  return session.value("SELECT current_schema()", {}, "reading the target's current schema");
}

}  // namespace idem
