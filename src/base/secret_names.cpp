// SPDX-License-Identifier: MIT
// Which settings hold a secret (secret_names.hpp).
#include "base/secret_names.hpp"

#include <array>
#include <cctype>
#include <string_view>

namespace idem {

namespace {

bool ends_with(std::string_view text, std::string_view tail) {
  return text.size() >= tail.size() && text.substr(text.size() - tail.size()) == tail;
}

}  // namespace

bool names_a_secret(const std::string& name) {
  std::string upper;
  upper.reserve(name.size());
  for (const char c : name) {
    upper.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  }
  // A file that holds a credential is one too (GS_OAUTH2_PRIVATE_KEY_FILE, AWS_WEB_IDENTITY_TOKEN_
  // FILE): its path says where the secret is, and changes with it.
  std::string_view stem = upper;
  if (ends_with(stem, "_FILE")) {
    stem.remove_suffix(5);
  }
  static constexpr std::array<std::string_view, 4> k_secret_tails = {
      "_KEY", "_SAS", "_CONNECTION_STRING", "_BEARER"};
  for (const std::string_view tail : k_secret_tails) {
    if (ends_with(stem, tail)) {
      return true;
    }
  }
  static constexpr std::array<std::string_view, 6> k_secret_words = {
      "SECRET", "PASSWORD", "PASSWD", "USERPWD", "TOKEN", "CREDENTIAL"};
  for (const std::string_view word : k_secret_words) {
    if (stem.find(word) != std::string_view::npos) {
      return true;
    }
  }
  // Documented credentials whose names say nothing of it (GDAL's configuration options for
  // /vsiaz/, /vsicurl/ and HTTP, libpq's): matched whole.
  static constexpr std::array<std::string_view, 8> k_named = {"KEY",
                                                              "AZURE_SAS",
                                                              "GDAL_HTTP_HEADERS",
                                                              "GDAL_HTTP_HEADER_FILE",
                                                              "GDAL_HTTP_AUTH",
                                                              "PGPASSFILE",
                                                              "WEBHDFS_DELEGATION",
                                                              "GDAL_HTTP_BEARER"};
  for (const std::string_view named : k_named) {
    if (upper == named) {
      return true;
    }
  }
  return false;
}

}  // namespace idem
