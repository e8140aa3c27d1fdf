// SPDX-License-Identifier: MIT
// Passwords a PostgreSQL DSN carries (dsn_secrets.hpp).
#include "pg/dsn_secrets.hpp"

#include <algorithm>
#include <cctype>

#include "cpl_string.h"

namespace idem {

namespace {

constexpr const char* k_redacted = "XXXX";

}  // namespace

std::string scrub_secret(std::string message, const std::string& secret) {
  if (secret.empty()) {
    return message;
  }
  const std::string mask = k_redacted;
  size_t pos = 0;
  while ((pos = message.find(secret, pos)) != std::string::npos) {
    message.replace(pos, secret.size(), mask);
    pos += mask.size();
  }
  return message;
}

namespace {

std::string percent_decoded(const std::string& text) {
  std::string result;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() &&
        std::isxdigit(static_cast<unsigned char>(text[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(text[i + 2]))) {
      result += static_cast<char>(std::stoi(text.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      result += text[i];
    }
  }
  return result;
}

// A keyword value as written (quotes and backslashes kept), from `start` to its end: the closing
// quote, else the first blank, else the end of the text.
std::string raw_keyword_value(const std::string& dsn, size_t start) {
  size_t end = start;
  if (end < dsn.size() && dsn[end] == '\'') {
    for (++end; end < dsn.size(); ++end) {
      if (dsn[end] == '\\') {
        ++end;
      } else if (dsn[end] == '\'') {
        ++end;
        break;
      }
    }
  } else {
    while (end < dsn.size() && !std::isspace(static_cast<unsigned char>(dsn[end]))) {
      ++end;
    }
  }
  return dsn.substr(start, std::min(end, dsn.size()) - start);
}

// The forms a written value can take in a message: as written, unquoted, unescaped.
void add_value_forms(const std::string& raw, std::vector<std::string>& secrets) {
  secrets.push_back(raw);
  std::string inner = raw;
  if (inner.size() >= 1 && inner.front() == '\'') {
    inner.erase(0, 1);
    if (!inner.empty() && inner.back() == '\'') {
      inner.pop_back();
    }
    secrets.push_back(inner);
  }
  std::string unescaped;
  for (size_t i = 0; i < inner.size(); ++i) {
    if (inner[i] == '\\' && i + 1 < inner.size()) {
      ++i;
    }
    unescaped += inner[i];
  }
  secrets.push_back(unescaped);
  secrets.push_back(percent_decoded(inner));
}

}  // namespace

std::vector<std::string> dsn_secrets(const std::string& dsn) {
  std::vector<std::string> secrets;
  const std::string lowered = CPLString(dsn).tolower();
  // URI user info: everything between "://" and the last '@' before any '?' (or the end), after
  // the first ':'. Found without parsing the URI, so a malformed one is covered too.
  const size_t scheme = dsn.find("://");
  if (scheme != std::string::npos) {
    const std::string rest = dsn.substr(scheme + 3);
    const std::string before_query = rest.substr(0, rest.find('?'));
    const size_t at = before_query.rfind('@');
    if (at != std::string::npos) {
      const std::string userinfo = before_query.substr(0, at);
      const size_t colon = userinfo.find(':');
      if (colon != std::string::npos) {
        add_value_forms(userinfo.substr(colon + 1), secrets);
      }
    }
  }
  // "password" followed by '=' (blanks allowed around it), in keyword strings and URI queries.
  for (size_t pos = lowered.find("password"); pos != std::string::npos;
       pos = lowered.find("password", pos + 1)) {
    size_t i = pos + 8;
    while (i < dsn.size() && std::isspace(static_cast<unsigned char>(dsn[i]))) {
      ++i;
    }
    if (i >= dsn.size() || dsn[i] != '=') {
      continue;
    }
    ++i;
    while (i < dsn.size() && std::isspace(static_cast<unsigned char>(dsn[i]))) {
      ++i;
    }
    std::string raw = raw_keyword_value(dsn, i);
    add_value_forms(raw.substr(0, raw.find('&')), secrets);
  }
  secrets.erase(std::remove_if(secrets.begin(), secrets.end(),
                               [](const std::string& secret) { return secret.empty(); }),
                secrets.end());
  // Longest first, so that a secret containing another is masked whole.
  std::sort(secrets.begin(), secrets.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  secrets.erase(std::unique(secrets.begin(), secrets.end()), secrets.end());
  return secrets;
}

std::optional<std::vector<ConninfoKeyword>> scan_conninfo_keywords(const std::string& text) {
  std::vector<ConninfoKeyword> keywords;
  const size_t n = text.size();
  size_t i = 0;
  const auto skip_blanks = [&] {
    while (i < n && std::isspace(static_cast<unsigned char>(text[i]))) {
      ++i;
    }
  };
  for (;;) {
    skip_blanks();
    if (i >= n) {
      return keywords;
    }
    ConninfoKeyword keyword;
    keyword.name_begin = i;
    while (i < n && text[i] != '=' && !std::isspace(static_cast<unsigned char>(text[i]))) {
      keyword.name += text[i++];
    }
    skip_blanks();
    if (i >= n || text[i] != '=' || keyword.name.empty()) {
      return std::nullopt;
    }
    ++i;
    skip_blanks();
    keyword.value_begin = i;
    const bool quoted = i < n && text[i] == '\'';
    if (quoted) {
      ++i;
    }
    bool closed = !quoted;
    while (i < n) {
      if (text[i] == '\\') {
        ++i;
        if (i < n) {
          keyword.value += text[i++];
        }
      } else if (quoted && text[i] == '\'') {
        ++i;
        closed = true;
        break;
      } else if (!quoted && std::isspace(static_cast<unsigned char>(text[i]))) {
        break;
      } else {
        keyword.value += text[i++];
      }
    }
    if (!closed) {
      return std::nullopt;
    }
    keyword.value_end = i;
    keywords.push_back(std::move(keyword));
  }
}

std::string scrub_secrets(std::string message, const std::vector<std::string>& secrets) {
  for (const std::string& secret : secrets) {
    message = scrub_secret(std::move(message), secret);
  }
  return message;
}

}  // namespace idem
