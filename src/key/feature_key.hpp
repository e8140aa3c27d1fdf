// SPDX-License-Identifier: MIT
// Feature loads (ogr2ogr into PostGIS): the ogr2ogr command as GDAL's own parser reads it, the
// target table it writes, and the idempotency key of the load (docs/loads.md, "The key").
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/canonical_json.hpp"
#include "key/source_digest.hpp"

namespace idem {

// Bump when anything that goes into a feature load's canonical JSON changes (docs/loads.md).
constexpr int k_feature_load_version = 1;

enum class LoadMode { k_replace, k_append };

// "replace" / "append" (any case); throws idem::Error(k_usage) otherwise.
LoadMode parse_load_mode(const std::string& text);
const char* load_mode_name(LoadMode mode);

// An ogr2ogr command line split exactly as GDALVectorTranslateOptionsNew() reads it.
struct Ogr2ogrCommand {
  std::vector<std::string> options;  // every non-positional token, in order
  std::string destination;           // first positional: the PG: connection string
  std::string source;                // second positional: the bundle
  std::vector<std::string> layers;   // further positionals: source layer names
  // --config NAME VALUE pairs given on the command line (already applied to the process).
  std::vector<std::pair<std::string, std::string>> config;
  std::optional<LoadMode> mode_from_flags;  // -overwrite (replace) / -append (append)
};

// Parse the arguments after the program name ("ogr2ogr"): general options (--config, --debug...)
// are applied as the program would; positional arguments are found by probing GDAL's parser.
// Throws idem::Error(k_usage) for invalid options or a missing source/destination.
Ogr2ogrCommand parse_ogr2ogr_command(const std::vector<std::string>& arguments);

// The PostgreSQL table a load writes.
struct FeatureTarget {
  std::string conninfo;               // libpq connection string (GDAL-only keywords removed)
  std::optional<std::string> schema;  // explicit schema (-nln s.t, -lco SCHEMA, active_schema);
                                      // after describe_feature_load, the server's when not given
  std::string table;                  // as the PG driver will name it (laundered unless
                                      // -lco LAUNDER=NO)
  JsonValue database;                 // {"dbname","host","hostaddr","port","service"} given
  std::string display;                // for messages and the ledger's output_uri, no password
};

struct FeatureLoadSettings {
  std::string namespace_name = "default";
  std::optional<LoadMode> mode;  // --mode; else the command's flags; else replace
  SourceDigestPolicy digest_policy = SourceDigestPolicy::k_auto;
  DigestCache* digest_cache = nullptr;  // may be null
  // Asks the target's server for the schema its connection writes into (current_schema()):
  // called when the command names none (work/target_session.hpp: ask_current_schema).
  std::function<std::string(const FeatureTarget&)> current_schema;
};

struct FeatureWork {
  LoadMode mode = LoadMode::k_replace;
  std::string namespace_name;
  FeatureTarget target;
  std::string bundle;          // the source as given, made absolute (append mode's provenance)
  std::string canonical_json;  // what the key hashes
  std::string key;
  std::string output_uri;  // the ledger's output_uri: the table (append: plus the bundle)
};

// Resolve the target and describe the load: opens the source (vector) to identify every file of
// its file list by content. Throws idem::Error: k_usage for bad options or a non-PostgreSQL
// target, k_source for an unreadable bundle.
FeatureWork describe_feature_load(const Ogr2ogrCommand& command,
                                  const FeatureLoadSettings& settings);

// The options GDALVectorTranslate gets to load the source into `staging_layer` (a layer name
// the PG driver takes as given, schema-qualified when the target's schema is explicit): the
// command's options without the target's name, the access-mode flags and -progress, plus
// -nln staging and -progress (the caller drives progress), then the source layer names.
std::vector<std::string> staging_translate_options(const Ogr2ogrCommand& command,
                                                   const std::string& staging_layer);

}  // namespace idem
