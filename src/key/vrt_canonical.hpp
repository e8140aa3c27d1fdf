// SPDX-License-Identifier: MIT
// A VRT's XML (what GDAL's xml:VRT metadata serialises: a translation or a whole warp) as
// canonical JSON: paths become source identities, CRSs are normalised, numbers canonicalised,
// attempt-varying settings dropped; everything else goes in as written (docs/keys.md).
#pragma once

#include <string>

#include "base/canonical_json.hpp"
#include "key/source_identity.hpp"

namespace idem {

struct VrtCanonicalOptions {
  // Directory that relativeToVRT="1" paths are relative to; "" for an in-memory VRT, whose
  // relative paths are relative to the working directory (docs/internals.md §1).
  std::string vrt_dir;
  SourceIdentityOptions sources;
};

// Parse `xml` and canonicalise it. Throws idem::Error (k_source for unreadable sources, k_usage
// for a CRS that cannot be parsed, k_internal for XML that does not parse).
JsonValue canonical_vrt(const std::string& xml, const VrtCanonicalOptions& options);

}  // namespace idem
