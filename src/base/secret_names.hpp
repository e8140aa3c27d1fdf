// SPDX-License-Identifier: MIT
// Which settings hold a secret: no secret enters a key, a ledger row or an output (docs/loads.md
// "Never stored"). The one rule every place that records a setting asks.
#pragma once

#include <string>

namespace idem {

// Whether the configuration option or NAME=VALUE option named `name` (any case) holds a
// credential: its name (less a trailing _FILE: a file holding one counts as one) ends in _KEY,
// _SAS, _CONNECTION_STRING or _BEARER, or holds SECRET, PASSWORD, PASSWD, USERPWD, TOKEN or
// CREDENTIAL; or it is one of the documented ones whose name says nothing of it (KEY, AZURE_SAS,
// GDAL_HTTP_HEADERS and GDAL_HTTP_HEADER_FILE, which carry Authorization headers, GDAL_HTTP_AUTH,
// GDAL_HTTP_BEARER, WEBHDFS_DELEGATION, PGPASSFILE).
bool names_a_secret(const std::string& name);

}  // namespace idem
