// SPDX-License-Identifier: MIT
// CRS normalisation for the key: every spelling of one CRS gives one canonical form.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "base/canonical_json.hpp"
#include "key/source_digest.hpp"

namespace idem {

// The canonical identity of a CRS given in any spelling GDAL accepts (EPSG:n in any case, URN,
// WKT1, WKT2, PROJJSON, PROJ string): "AUTH:CODE" when PROJ identifies it with an authority entry
// that is strictly equivalent (same datum, parameters and units; axis order aside, see below),
// else {"projjson": <PROJJSON of the CRS as given>}.
// Network and file access are refused while parsing. Throws idem::Error(k_usage) when the
// definition cannot be parsed.
JsonValue normalize_crs(const std::string& definition);

// As normalize_crs, plus the data axis mapping (GDAL's dataAxisToSRSAxisMapping, e.g. "2,1"):
// {"crs": <normalize_crs>, "data_axes": ["East","North"]}: the direction of the CRS axis each
// data axis carries, so EPSG:4326 read in traditional GIS order and +proj=longlat give the same.
// `memo`, when given (the ledger's digest cache), remembers answers across processes: a worker
// process otherwise spends time (bench/RESULTS.md) opening PROJ's database to answer the same two
// questions as the previous one. Entries are keyed by the question and the GDAL, PROJ and proj.db
// they were computed with, so an upgrade asks PROJ again.
JsonValue normalize_crs_with_axes(const std::string& definition,
                                  const std::string& data_axis_mapping,
                                  DigestCache* memo = nullptr);

// Reads the memo's answers to these questions (definition, data axis mapping) at once, so that
// the normalize_crs_with_axes calls that follow find them without asking the memo one by one
// (one round trip to a PostgreSQL ledger instead of one per CRS), and in the same get_many the
// entries `also` of the same cache; returns what was found of `also`.
std::map<std::string, std::string> prefetch_crs_answers(
    const std::vector<std::pair<std::string, std::string>>& questions, DigestCache& memo,
    const std::vector<DigestCache::Entry>& also = {});

// The memo entries prefetch_crs_answers would read for these questions (none for an answer
// this process remembers already): what to pass to DigestCache::read_ahead.
std::vector<std::string> crs_memo_paths(
    const std::vector<std::pair<std::string, std::string>>& questions);

}  // namespace idem
