// SPDX-License-Identifier: MIT
// The backend-independent part of the ledger: opening by DSN, DSN redaction, the default SQLite
// path, and the migrations embedded from sql/ at build time.
#include "ledger/ledger.hpp"

#include <libpq-fe.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>

#include "base/error.hpp"
#include "cpl_string.h"
#include "idem_embedded_sql.hpp"
#include "ledger/ledger_internal.hpp"
#include "pg/dsn_secrets.hpp"
#include "pg/pg_handles.hpp"

namespace idem {

namespace {

constexpr const char* k_redacted = "XXXX";

bool is_uri(const std::string& dsn) {
  return STARTS_WITH(dsn.c_str(), "postgresql://") || STARTS_WITH(dsn.c_str(), "postgres://");
}

std::string redact_uri(const std::string& dsn) {
  const size_t scheme_end = dsn.find("://") + 3;
  std::string result = dsn.substr(0, scheme_end);
  const std::string rest = dsn.substr(scheme_end);
  const size_t query_start = rest.find('?');
  const std::string before_query = rest.substr(0, query_start);
  // The last '@' before the query ends the user info (over-redacting is fine, leaking is not).
  const size_t at = before_query.rfind('@');
  if (at != std::string::npos) {
    const std::string userinfo = before_query.substr(0, at);
    const size_t colon = userinfo.find(':');
    if (colon != std::string::npos) {
      result += userinfo.substr(0, colon + 1) + k_redacted;
    } else {
      result += userinfo;
    }
    result += before_query.substr(at);
  } else {
    result += before_query;
  }
  if (query_start == std::string::npos) {
    return result;
  }
  result += '?';
  const std::string query = rest.substr(query_start + 1);
  size_t pos = 0;
  bool first = true;
  while (pos <= query.size()) {
    size_t amp = query.find('&', pos);
    if (amp == std::string::npos) {
      amp = query.size();
    }
    const std::string param = query.substr(pos, amp - pos);
    if (!first) {
      result += '&';
    }
    first = false;
    const size_t eq = param.find('=');
    if (eq != std::string::npos && EQUAL(param.substr(0, eq).c_str(), "password")) {
      result += param.substr(0, eq + 1) + k_redacted;
    } else {
      result += param;
    }
    pos = amp + 1;
  }
  return result;
}

// Whether libpq knows `name` as a connection keyword (PQconndefaults).
bool is_libpq_keyword(const std::string& name) {
  static const std::set<std::string> k_known = [] {
    std::set<std::string> known;
    const pg::ConninfoOptions defaults(PQconndefaults());
    for (const PQconninfoOption* option = defaults.get();
         option != nullptr && option->keyword != nullptr; ++option) {
      known.insert(option->keyword);
    }
    return known;
  }();
  return k_known.count(name) != 0;
}

// A libpq keyword string with its password values masked, and the keywords libpq does not know
// masked whole, name and value (`pasword=...` is a password all the same, and so may be a word
// a stray quote or blank made a name of); nullopt when it cannot be read as one (the caller then
// hides it all).
std::optional<std::string> redact_keywords(const std::string& dsn) {
  const auto keywords = scan_conninfo_keywords(dsn);
  if (!keywords) {
    return std::nullopt;
  }
  std::string result = dsn;
  for (auto keyword = keywords->rbegin(); keyword != keywords->rend(); ++keyword) {
    if (!is_libpq_keyword(keyword->name)) {
      result.replace(keyword->name_begin, keyword->value_end - keyword->name_begin, k_redacted);
    } else if (keyword->name == "password") {
      result.replace(keyword->value_begin, keyword->value_end - keyword->value_begin, k_redacted);
    }
  }
  return result;
}

}  // namespace

bool OutputFingerprint::operator==(const OutputFingerprint& other) const {
  return size == other.size && mtime_ns == other.mtime_ns && sha256 == other.sha256 &&
         etag == other.etag && members == other.members;
}

ClaimResult WorkerLedger::claim_unless_completed(const ClaimRequest& request) {
  LedgerRow row = lookup(request.work_key);
  if (ledger_detail::classify_lost_claim(row) == ClaimOutcome::k_completed) {
    return ledger_detail::claim_result(ClaimOutcome::k_completed, std::move(row));
  }
  return claim(request);
}

ClaimResult WorkerLedger::claim_unless_completed(const ClaimRequest& request,
                                                 const std::function<void()>& /*meanwhile*/) {
  return claim_unless_completed(request);
}

bool WorkerLedger::confirm_claim(const std::string& /*work_key*/,
                                 const std::string& /*claim_token*/) {
  return true;
}

std::vector<LedgerRow> Ledger::rows_on_output(const std::string& output_uri, RowState state) {
  RowFilter filter;
  filter.output_uri = output_uri;
  filter.state = state;
  return rows(filter);
}

std::string Ledger::redact_dsn(const std::string& dsn) {
  if (backend_of(dsn) == "sqlite") {
    return dsn;
  }
  // What the parse of either form leaves is masked again with the secrets found without it.
  if (is_uri(dsn)) {
    return scrub_secrets(redact_uri(dsn), dsn_secrets(dsn));
  }
  if (auto redacted = redact_keywords(dsn)) {
    return scrub_secrets(*redacted, dsn_secrets(dsn));
  }
  return "<unparsable PostgreSQL connection string>";
}

std::string Ledger::backend_of(const std::string& dsn) {
  // "file:..." is an SQLite URI (refused by sqlite_path_of, saying how to write a path), even
  // with parameters whose '=' would make it look like a libpq keyword string.
  if (dsn.empty() || STARTS_WITH(dsn.c_str(), "sqlite:") || STARTS_WITH_CI(dsn.c_str(), "file:")) {
    return "sqlite";
  }
  if (is_uri(dsn) || dsn.find('=') != std::string::npos) {
    return "postgresql";
  }
  return "sqlite";  // a bare path
}

std::string Ledger::default_sqlite_path() {
  const char* state_home = std::getenv("XDG_STATE_HOME");
  std::string base;
  if (state_home != nullptr && state_home[0] == '/') {
    base = state_home;
  } else {
    const char* home = std::getenv("HOME");
    if (home == nullptr || home[0] == '\0') {
      const passwd* entry = getpwuid(getuid());
      home = entry != nullptr ? entry->pw_dir : nullptr;
    }
    if (home == nullptr) {
      throw Error(ErrorKind::k_ledger,
                  "cannot find a directory for the default ledger: set IDEM_LEDGER=sqlite:PATH "
                  "or XDG_STATE_HOME");
    }
    base = std::string(home) + "/.local/state";
  }
  return base + "/gdal-idem/ledger.sqlite";
}

std::optional<std::string> Ledger::sqlite_path_of(const std::string& dsn) {
  if (backend_of(dsn) == "postgresql") {
    return std::nullopt;
  }
  std::string path;
  if (dsn.empty()) {
    path = default_sqlite_path();
  } else if (STARTS_WITH(dsn.c_str(), "sqlite:")) {
    path = dsn.substr(7);
    if (STARTS_WITH(path.c_str(), "//")) {
      path = path.substr(2);  // sqlite:///abs/path
    }
  } else {
    path = dsn;
  }
  if (path.empty()) {
    throw Error(ErrorKind::k_usage,
                "IDEM_LEDGER=sqlite: needs a path (sqlite:/path/ledger.sqlite)");
  }
  // SQLite would open "file:..." as a URI, whose parameters (immutable, nolock, vfs=) can turn
  // off the locking between workers, and which names another file than the one IDEM protects.
  if (STARTS_WITH_CI(path.c_str(), "file:")) {
    throw Error(ErrorKind::k_usage,
                "the ledger '" + path +
                    "' is an SQLite URI; IDEM takes a path to the database file: write "
                    "IDEM_LEDGER=sqlite:/path/to/ledger.sqlite (URI parameters such as "
                    "immutable, nolock or vfs= would turn off the locking between workers)");
  }
  return path;
}

std::unique_ptr<Ledger> Ledger::open(const std::string& dsn) {
  const std::optional<std::string> path = sqlite_path_of(dsn);
  if (!path) {
    return ledger_detail::open_postgres_ledger(dsn);
  }
  return ledger_detail::open_sqlite_ledger(*path);
}

std::unique_ptr<Ledger> Ledger::open_existing(const std::string& dsn) {
  const std::optional<std::string> path = sqlite_path_of(dsn);
  struct stat info {};
  if (path && ::stat(path->c_str(), &info) != 0) {
    throw Error(ErrorKind::k_usage, "there is no ledger at " + *path +
                                        ": check --ledger or IDEM_LEDGER (sqlite:PATH); "
                                        "`gdal-idem init` creates a new one");
  }
  return open(dsn);
}

std::unique_ptr<Ledger> Ledger::open_read_only(const std::string& dsn) {
  const std::optional<std::string> path = sqlite_path_of(dsn);
  if (!path) {
    return ledger_detail::open_postgres_ledger(dsn, true);
  }
  struct stat info {};
  if (::stat(path->c_str(), &info) != 0) {
    throw Error(ErrorKind::k_usage, "there is no ledger at " + *path +
                                        ": check --ledger or IDEM_LEDGER (sqlite:PATH); "
                                        "`gdal-idem init` creates a new one");
  }
  return ledger_detail::open_sqlite_ledger(*path, true);
}

void Ledger::preopen(const std::string& dsn) {
  if (backend_of(dsn) == "postgresql") {
    ledger_detail::preopen_postgres_ledger(dsn);
  }
}

void Ledger::advance_preopened() {
  ledger_detail::advance_postgres_preopens();
}

namespace ledger_detail {

void check_schema_version(const std::string& label, const std::string& backend,
                          const std::vector<int>& applied, bool read_only) {
  const std::vector<Migration> known = migrations(backend);
  const int newest_known = known.empty() ? 0 : known.back().version;
  const int newest_applied =
      applied.empty() ? 0 : *std::max_element(applied.begin(), applied.end());
  if (newest_applied > newest_known) {
    throw Error(ErrorKind::k_ledger,
                "the ledger " + label + " has schema version " + std::to_string(newest_applied) +
                    ", newer than this release of gdal-idem knows (" +
                    std::to_string(newest_known) +
                    "): it was migrated by a newer release; upgrade gdal-idem on this machine");
  }
  if (!read_only) {
    return;
  }
  if (applied.empty()) {
    throw Error(ErrorKind::k_ledger, label +
                                         " is not an IDEM ledger (it has no schema_version "
                                         "table): check --ledger or IDEM_LEDGER; nothing was "
                                         "changed");
  }
  for (const Migration& migration : known) {
    if (!migration.requires_extension && migration.readers_need &&
        std::find(applied.begin(), applied.end(), migration.version) == applied.end()) {
      throw Error(ErrorKind::k_ledger,
                  "the ledger " + label + " is at schema version " +
                      std::to_string(newest_applied) + " and lacks migration " + migration.name +
                      ", which this release reads: run `gdal-idem init` to migrate it");
    }
  }
}

}  // namespace ledger_detail

std::vector<Migration> migrations(const std::string& backend) {
  std::string directory;
  if (backend == "sqlite") {
    directory = "sqlite/";
  } else if (backend == "postgresql" || backend == "postgres") {
    directory = "postgres/";
  } else {
    throw Error(ErrorKind::k_usage, "unknown ledger backend '" + backend + "'");
  }
  std::vector<Migration> result;
  for (const auto& file : embedded_sql::k_files) {
    const std::string path = file.path;
    if (!STARTS_WITH(path.c_str(), directory.c_str())) {
      continue;
    }
    const std::string name = path.substr(directory.size());
    if (name.size() < 6 || !std::all_of(name.begin(), name.begin() + 4, ::isdigit) ||
        name[4] != '_') {
      continue;  // not a numbered migration (e.g. worker_role.sql)
    }
    Migration migration;
    migration.version = std::stoi(name.substr(0, 4));
    migration.name = name;
    migration.sql = file.text;
    const std::string marker = "-- idem:requires-extension ";
    const size_t at = migration.sql.find(marker);
    if (at != std::string::npos) {
      const size_t start = at + marker.size();
      const size_t end = migration.sql.find_first_of(" \t\r\n", start);
      migration.requires_extension = migration.sql.substr(start, end - start);
    }
    migration.readers_need = migration.sql.find("-- idem:readers-need-not") == std::string::npos;
    result.push_back(std::move(migration));
  }
  std::sort(result.begin(), result.end(),
            [](const Migration& a, const Migration& b) { return a.version < b.version; });
  return result;
}

namespace ledger_detail {

namespace {

// The keywords a libpq DSN (URI or keyword string) sets, with their values; empty when it does
// not parse (libpq reports that when connecting).
std::map<std::string, std::string> dsn_keywords(const std::string& dsn) {
  const pg::ConninfoOptions options = pg::parse_conninfo(dsn);
  std::map<std::string, std::string> keywords;
  for (const PQconninfoOption* option = options.get();
       option != nullptr && option->keyword != nullptr; ++option) {
    if (option->val != nullptr) {
      keywords.emplace(option->keyword, option->val);
    }
  }
  return keywords;
}

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0 ||
         (!host.empty() && (host[0] == '/' || host[0] == '@'));  // a Unix socket
}

}  // namespace

std::chrono::seconds connect_timeout_of(const std::string& dsn) {
  const auto keywords = dsn_keywords(dsn);
  const auto found = keywords.find("connect_timeout");
  if (found == keywords.end()) {
    return std::chrono::seconds(k_default_connect_timeout_seconds);
  }
  const long seconds = std::strtol(found->second.c_str(), nullptr, 10);
  if (seconds <= 0) {
    return std::chrono::hours(24 * 365);  // no timeout
  }
  return std::chrono::seconds(std::max(2L, seconds));  // libpq's minimum
}

bool skip_gss_encryption(const std::string& dsn) {
  const auto keywords = dsn_keywords(dsn);
  if (keywords.empty() || keywords.count("gssencmode") != 0 || keywords.count("service") != 0 ||
      std::getenv("PGGSSENCMODE") != nullptr || std::getenv("PGSERVICE") != nullptr) {
    return false;
  }
  // hostaddr, when given, is where libpq connects; else host, else PGHOST (else a Unix socket,
  // where libpq does not try GSSAPI encryption anyway).
  std::string hosts;
  for (const char* keyword : {"hostaddr", "host"}) {
    const auto found = keywords.find(keyword);
    if (found != keywords.end() && !found->second.empty()) {
      hosts = found->second;
      break;
    }
  }
  if (hosts.empty()) {
    const char* environment = std::getenv("PGHOST");
    hosts = environment != nullptr ? environment : "";
  }
  if (hosts.empty()) {
    return false;
  }
  for (size_t start = 0;;) {
    const size_t comma = hosts.find(',', start);
    if (!is_loopback_host(hosts.substr(start, comma - start))) {
      return false;
    }
    if (comma == std::string::npos) {
      return true;
    }
    start = comma + 1;
  }
}

std::optional<Ledger::RowFilter> history_scope(const Ledger::RowFilter& filter) {
  if (filter.state == RowState::k_absent || filter.state == RowState::k_in_flight ||
      filter.expired_only) {
    return std::nullopt;
  }
  Ledger::RowFilter scope = filter;
  scope.state.reset();
  return scope;
}

Ledger::RowFilter forget_scope(const Ledger::RowFilter& filter) {
  if (!filter.namespace_name && !filter.layer && !filter.output_uri && !filter.work_key) {
    throw Error(ErrorKind::k_usage, "forgetting rows needs a namespace, layer, output or key");
  }
  Ledger::RowFilter scope = filter;
  scope.limit.reset();
  return scope;
}

}  // namespace ledger_detail

}  // namespace idem
