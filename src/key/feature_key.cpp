// SPDX-License-Identifier: MIT
// Feature loads: the ogr2ogr command as GDAL's parser reads it, the target table, and the key.
#include "key/feature_key.hpp"

#include <libpq-fe.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <utility>

#include "base/error.hpp"
#include "base/labels.hpp"
#include "base/paths.hpp"
#include "base/secret_names.hpp"
#include "cpl_conv.h"
#include "cpl_error.h"
#include "cpl_string.h"
#include "gdal_priv.h"
#include "gdal_utils.h"
#include "key/command_line.hpp"
#include "key/crs_normalize.hpp"
#include "key/source_drivers.hpp"
#include "key/source_identity.hpp"
#include "key/work_key.hpp"
#include "ogrsf_frmts.h"
#include "pg/dsn_secrets.hpp"
#include "pg/pg_handles.hpp"

namespace idem {

namespace {

bool starts_with_ci(const std::string& text, const std::string& prefix) {
  return text.size() >= prefix.size() && EQUALN(text.c_str(), prefix.c_str(), prefix.size());
}

std::string canonical_number(const std::string& text) {
  std::string out;
  return canonical_number_text(text, out) ? out : text;
}

// Value tokens of the option at `i` in `options`.
int arity_at(const std::vector<std::string>& options, size_t i) {
  return static_cast<int>(option_value_count(GdalProgram::k_ogr2ogr, options, i));
}

// A NAME=VALUE token's name, upper-cased.
std::string option_name(const std::string& token) {
  return CPLString(token.substr(0, token.find('='))).toupper();
}

std::string option_value(const std::string& token) {
  const size_t equals = token.find('=');
  return equals == std::string::npos ? std::string() : token.substr(equals + 1);
}

// The value of the last `-option VALUE` pair, if any.
std::optional<std::string> last_value(const std::vector<std::string>& options,
                                      const std::string& option) {
  std::optional<std::string> value;
  for (size_t i = 0; i < options.size(); i += 1 + arity_at(options, i)) {
    if (options[i] == option && i + 1 < options.size()) {
      value = options[i + 1];
    }
  }
  return value;
}

// Values of every `-lco NAME=...` with this name (first wins, as CSLFetchNameValue reads).
std::optional<std::string> layer_creation_option(const std::vector<std::string>& options,
                                                 const std::string& name) {
  for (size_t i = 0; i < options.size(); i += 1 + arity_at(options, i)) {
    if (options[i] == "-lco" && i + 1 < options.size() && option_name(options[i + 1]) == name) {
      return option_value(options[i + 1]);
    }
  }
  return std::nullopt;
}

std::vector<std::string> open_options_of(const std::vector<std::string>& options) {
  std::vector<std::string> result;
  for (size_t i = 0; i < options.size(); i += 1 + arity_at(options, i)) {
    if (options[i] == "-oo" && i + 1 < options.size()) {
      result.push_back(options[i + 1]);
    }
  }
  return result;
}

// ---------------------------------------------------------------------------------------------
// The target: GDAL's PG: connection string, minus the keywords only the PG driver knows.

std::string quote_keyword_value(const std::string& value) {
  std::string out = "'";
  for (char c : value) {
    if (c == '\'' || c == '\\') {
      out += '\\';
    }
    out += c;
  }
  return out + "'";
}

// The PG driver's default name laundering (LAUNDER=YES): lower case, ' - # become _.
std::string launder(const std::string& name) {
  std::string out = CPLString(name).tolower();
  for (char& c : out) {
    if (c == '\'' || c == '-' || c == '#') {
      c = '_';
    }
  }
  return out;
}

// The names are passed on to GDAL's PostgreSQL driver, which writes some of them into its SQL
// unquoted (-lco SCHEMA='x"; drop table t; --' runs that SQL through plain ogr2ogr): a quote, a
// semicolon, a backslash or a control character in one is refused before anything is sent.
void check_target_name(const std::string& what, const std::string& value) {
  check_label(what, value);
  if (value.find_first_of("\"';\\") != std::string::npos) {
    throw Error(ErrorKind::k_usage,
                what + " '" + value +
                    "' holds a quote, a semicolon or a backslash, which GDAL's PostgreSQL driver "
                    "would write into its SQL as they are: name tables and schemas with letters, "
                    "digits, '_', '-', '.' or spaces");
  }
}

FeatureTarget resolve_target(const Ogr2ogrCommand& command, const std::string& layer_name) {
  if (const auto format = last_value(command.options, "-f")) {
    if (!EQUAL(format->c_str(), "PostgreSQL")) {
      throw Error(ErrorKind::k_usage,
                  "gdal-idem load writes PostgreSQL targets (-f PostgreSQL "
                  "PG:\"dbname=...\"), not -f " +
                      *format);
    }
  }
  if (!starts_with_ci(command.destination, "PG:")) {
    throw Error(ErrorKind::k_usage,
                "the destination must be a PostgreSQL connection string "
                "PG:\"dbname=... \" (got a non-PG destination)");
  }
  FeatureTarget target;
  std::string conninfo = command.destination.substr(3);
  std::optional<std::string> active_schema;
  if (conninfo.find("://") == std::string::npos) {
    const auto pairs = scan_conninfo_keywords(conninfo);
    if (!pairs) {
      throw Error(ErrorKind::k_usage,
                  "the PG: connection string is not a list of keyword=value "
                  "pairs");
    }
    conninfo.clear();
    for (const auto& pair : *pairs) {
      const std::string name = CPLString(pair.name).tolower();
      if (name == "active_schema") {
        active_schema = pair.value;
      } else if (name == "schemas" || name == "tables") {
        continue;  // read-side filters of the PG driver; nothing to do with the target
      } else {
        conninfo +=
            (conninfo.empty() ? "" : " ") + pair.name + "=" + quote_keyword_value(pair.value);
      }
    }
  }
  std::string reason;
  const pg::ConninfoOptions parsed = pg::parse_conninfo(conninfo, &reason);
  if (!parsed) {
    throw Error(ErrorKind::k_usage, "the PG: connection string cannot be parsed: " + reason);
  }
  target.conninfo = conninfo;
  target.database = JsonValue::object();
  std::string display = "PG:";
  // What the string leaves out, libpq takes from its environment (PGHOST, PGPORT, PGDATABASE,
  // PGSERVICE, PGHOSTADDR): the database written is the one those name, so they are keyed too.
  for (const PQconninfoOption* option = parsed.get(); option->keyword != nullptr; ++option) {
    const std::string keyword = option->keyword;
    if (keyword != "dbname" && keyword != "host" && keyword != "hostaddr" && keyword != "port" &&
        keyword != "service") {
      continue;
    }
    if (option->val != nullptr && *option->val != '\0') {
      target.database.set(keyword, JsonValue::string(option->val));
      display += (display.size() > 3 ? " " : "") + keyword + "=" + option->val;
    } else if (const char* from_environment =
                   option->envvar != nullptr ? std::getenv(option->envvar) : nullptr;
               from_environment != nullptr && *from_environment != '\0') {
      target.database.set(keyword, JsonValue::string(from_environment));
    }
  }

  const bool laundered =
      CPLTestBool(layer_creation_option(command.options, "LAUNDER").value_or("YES").c_str());
  std::string name = last_value(command.options, "-nln").value_or(layer_name);
  std::optional<std::string> schema;
  if (const auto lco_schema = layer_creation_option(command.options, "SCHEMA")) {
    schema = *lco_schema;
  } else if (const size_t dot = name.find('.'); dot != std::string::npos) {
    schema = name.substr(0, dot);
    name = name.substr(dot + 1);
  } else if (active_schema) {
    schema = active_schema;
  }
  check_target_name("the target table (-nln)", name);
  if (schema) {
    check_target_name("the target schema (-lco SCHEMA, -nln SCHEMA.TABLE or active_schema)",
                      *schema);
  }
  if (laundered) {
    name = launder(name);
  }
  if (name.empty()) {
    throw Error(ErrorKind::k_usage, "the target table name is empty: give -nln TABLE");
  }
  target.schema = schema;
  target.table = name;
  target.display = display + " table=" + (schema ? *schema + "." : std::string()) + name;
  return target;
}

// ---------------------------------------------------------------------------------------------
// The bundle's identity: every file of its file list, by content.

struct DatasetFree {
  void operator()(GDALDataset* dataset) const { GDALClose(GDALDataset::ToHandle(dataset)); }
};
using DatasetPtr = std::unique_ptr<GDALDataset, DatasetFree>;

DatasetPtr open_vector(const std::string& name, const std::vector<std::string>& open_options) {
  CPLStringList oo;
  for (const auto& option : open_options) {
    oo.AddString(option.c_str());
  }
  CPLErrorReset();
  GDALDataset* dataset = nullptr;
  {
    CPLErrorHandlerPusher quiet(CPLQuietErrorHandler);
    dataset = GDALDataset::Open(name.c_str(), GDAL_OF_VECTOR | GDAL_OF_READONLY, nullptr, oo.List(),
                                nullptr);
  }
  if (dataset == nullptr) {
    const std::string reason = CPLGetLastErrorMsg();
    throw Error(ErrorKind::k_source,
                "cannot open the bundle '" + name + "' as vector data" +
                    (reason.empty() ? std::string(": no driver recognises it or it is unreadable")
                                    : ": " + reason));
  }
  return DatasetPtr(dataset);
}

// "/vsizip//data/a.zip/roads.shp" -> ("/data/a.zip", "roads.shp") when the archive is a local
// file: its (cached) digest then identifies every member, without reading them.
std::optional<std::pair<std::string, std::string>> local_archive_of(const std::string& path) {
  for (const char* prefix : {"/vsizip/", "/vsitar/", "/vsi7z/"}) {
    if (path.rfind(prefix, 0) != 0) {
      continue;
    }
    const std::string rest = path.substr(std::string(prefix).size());
    for (size_t slash = rest.find('/', 1); slash != std::string::npos;
         slash = rest.find('/', slash + 1)) {
      const std::string archive = rest.substr(0, slash);
      VSIStatBufL info;
      if (!is_vsi_path(archive) && VSIStatL(archive.c_str(), &info) == 0 &&
          VSI_ISREG(info.st_mode)) {
        return std::make_pair(archive, rest.substr(slash + 1));
      }
    }
  }
  return std::nullopt;
}

JsonValue identity_of_files(GDALDataset* dataset, const std::string& name,
                            const FeatureLoadSettings& settings) {
  const CPLStringList files(dataset->GetFileList());
  if (files.size() == 0) {
    throw Error(ErrorKind::k_source, "the bundle '" + name +
                                         "' has no files to identify by content (a database or "
                                         "service source); gdal-idem load keys file-based bundles");
  }
  JsonValue list = JsonValue::array();
  const DriverReads reads = driver_reads(dataset);
  if (reads.kind == DriverReads::Kind::k_trusted) {
    JsonValue entry = JsonValue::object();
    entry.set("file_list_trusted", JsonValue::string(reads.driver));
    list.push_back(std::move(entry));
  } else if (reads.kind != DriverReads::Kind::k_file_list) {
    refuse_unknown_reads(name, reads.driver);
  }
  std::set<std::string> seen;
  for (int i = 0; i < files.size(); ++i) {
    const std::string path = files[i];
    if (!seen.insert(path).second) {
      continue;
    }
    JsonValue entry = JsonValue::object();
    if (const auto archive = local_archive_of(path)) {
      entry.set("archive_sha256_tree",
                JsonValue::string(digest_local_file(archive->first, settings.digest_cache)));
      entry.set("member", JsonValue::string(archive->second));
    } else {
      entry = source_digest_json(
          digest_source_file(path, settings.digest_policy, settings.digest_cache));
    }
    list.push_back(std::move(entry));
  }
  JsonValue identity = JsonValue::object();
  identity.set("files", std::move(list));
  return identity;
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error(ErrorKind::k_usage, "cannot read " + path + " (named with @ in the command)");
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The command's options as they go into the key (docs/loads.md): every token in order, except
// those that cannot change the loaded rows; CRSs normalised, numbers canonical, files by
// content.
JsonValue key_options(const Ogr2ogrCommand& command, const FeatureLoadSettings& settings) {
  static const std::set<std::string> k_dropped_flags = {
      "-progress", "-q",      "-quiet",          "-overwrite",
      "-append",   "-update", "-ds_transaction", "-lyr_transaction"};
  static const std::set<std::string> k_dropped_with_value = {"-gt", "-f", "-of", "-nln"};
  static const std::set<std::string> k_name_value_options = {"-oo", "-doo", "-lco", "-dsco"};
  static const std::set<std::string> k_crs_options = {"-a_srs", "-t_srs", "-s_srs", "-spat_srs"};
  static const std::set<std::string> k_number_options = {"-spat",  "-simplify",       "-segmentize",
                                                         "-limit", "-datelineoffset", "-gcp"};
  const std::vector<std::string>& options = command.options;
  JsonValue out = JsonValue::array();
  for (size_t i = 0; i < options.size();) {
    const std::string& option = options[i];
    const int arity = static_cast<int>(
        std::min<size_t>(static_cast<size_t>(arity_at(options, i)), options.size() - i - 1));
    auto value = [&](int k) { return options[i + 1 + k]; };
    // NOLINTNEXTLINE(bugprone-branch-clone): the empty branches keep nothing, each for its reason
    if (k_dropped_flags.count(option) != 0 || k_dropped_with_value.count(option) != 0) {
      // -gt, -ds_transaction, -lyr_transaction: transaction grouping only; -f, -nln: in the
      // target; -overwrite/-append/-update: the mode; -progress, -q: display.
    } else if (option == "-lco" && arity == 1 &&
               (option_name(value(0)) == "SCHEMA" || option_name(value(0)) == "OVERWRITE")) {
      // SCHEMA is in the target; OVERWRITE is the staging table's business.
    } else if (k_name_value_options.count(option) != 0 && arity == 1 &&
               names_a_secret(option_name(value(0)))) {
      // A credential (-oo PASSWORD=...): never stored, and rotating it is the same load.
    } else if (k_crs_options.count(option) != 0 && arity == 1) {
      out.push_back(JsonValue::string(option));
      out.push_back(normalize_crs(value(0)));
    } else if ((k_number_options.count(option) != 0 ||
                ((option == "-clipsrc" || option == "-clipdst") && arity == 4))) {
      out.push_back(JsonValue::string(option));
      for (int k = 0; k < arity; ++k) {
        out.push_back(JsonValue::string(canonical_number(value(k))));
      }
    } else if ((option == "-sql" || option == "-where") && arity == 1 && !value(0).empty() &&
               value(0)[0] == '@') {
      out.push_back(JsonValue::string(option));
      JsonValue file = JsonValue::object();
      file.set("text", JsonValue::string(read_text_file(value(0).substr(1))));
      out.push_back(std::move(file));
    } else if ((option == "-clipsrc" || option == "-clipdst") && arity == 1 &&
               !EQUAL(value(0).c_str(), "spat_extent") && !starts_with_ci(value(0), "POLYGON") &&
               !starts_with_ci(value(0), "MULTIPOLYGON")) {
      // A clipping datasource: by content, like the bundle.
      out.push_back(JsonValue::string(option));
      DatasetPtr clip = open_vector(value(0), {});
      out.push_back(identity_of_files(clip.get(), value(0), settings));
    } else {
      out.push_back(JsonValue::string(option));
      for (int k = 0; k < arity; ++k) {
        out.push_back(JsonValue::string(value(k)));
      }
    }
    i += 1 + arity;
  }
  return out;
}

// Config options given with --config that cannot change the loaded rows (docs/loads.md).
bool config_is_attempt_only(const std::string& name) {
  static const std::set<std::string> k_attempt_only = {"GDAL_CACHEMAX",
                                                       "GDAL_NUM_THREADS",
                                                       "CPL_DEBUG",
                                                       "CPL_LOG",
                                                       "CPL_LOG_ERRORS",
                                                       "CPL_TIMESTAMP",
                                                       "CPL_CURL_VERBOSE",
                                                       "PG_USE_COPY",
                                                       "GDAL_HTTP_TIMEOUT",
                                                       "GDAL_HTTP_MAX_RETRY",
                                                       "GDAL_HTTP_RETRY_DELAY",
                                                       "OGR_PG_CURSOR_PAGE",
                                                       "IDEM_LEDGER",
                                                       "IDEM_STALE_SECONDS",
                                                       "IDEM_ON_BUSY",
                                                       "IDEM_NAMESPACE",
                                                       "IDEM_SOURCE_DIGEST",
                                                       "IDEM_TEST_PAUSE_AT",
                                                       "IDEM_TEST_PAUSE_SECONDS",
                                                       "IDEM_TEST_REACHED_FILE",
                                                       "PGPASSWORD",
                                                       "PGPASSFILE",
                                                       "PGAPPNAME",
                                                       "PGCONNECT_TIMEOUT"};
  const std::string upper_name = CPLString(name).toupper();
  return k_attempt_only.count(upper_name) != 0 || upper_name.rfind("AWS_", 0) == 0 ||
         upper_name.rfind("GDAL_HTTP_", 0) == 0 || upper_name.rfind("CPL_VSIL_CURL_", 0) == 0;
}

// The bundle's name for append mode's provenance: the source made absolute, also inside an
// archive prefix ("/vsizip/a.zip/x.shp" -> "/vsizip//data/a.zip/x.shp").
std::string bundle_name(const std::string& source) {
  for (const char* prefix : {"/vsizip/", "/vsitar/", "/vsigzip/", "/vsi7z/"}) {
    const std::string rest = source.substr(std::min(source.size(), std::strlen(prefix)));
    if (source.rfind(prefix, 0) == 0 && !rest.empty() && rest[0] != '/' &&
        rest.rfind("/vsi", 0) != 0) {
      return prefix + absolute_path(rest);
    }
  }
  if (is_vsi_path(source) || starts_with_ci(source, "PG:") ||
      source.find(':') != std::string::npos) {
    return source;
  }
  return absolute_path(source);
}

}  // namespace

LoadMode parse_load_mode(const std::string& text) {
  const std::string mode = CPLString(text).tolower();
  if (mode == "replace") {
    return LoadMode::k_replace;
  }
  if (mode == "append") {
    return LoadMode::k_append;
  }
  throw Error(ErrorKind::k_usage, "--mode " + text + " is not valid: use replace or append");
}

const char* load_mode_name(LoadMode mode) {
  return mode == LoadMode::k_append ? "append" : "replace";
}

Ogr2ogrCommand parse_ogr2ogr_command(const std::vector<std::string>& arguments) {
  Ogr2ogrCommand command;
  for (size_t i = 0; i + 2 < arguments.size(); ++i) {
    if (EQUAL(arguments[i].c_str(), "--config")) {
      command.config.emplace_back(arguments[i + 1], arguments[i + 2]);
      i += 2;
    }
  }
  CPLStringList argv;
  argv.AddString("ogr2ogr");
  for (const auto& argument : arguments) {
    argv.AddString(argument.c_str());
  }
  char** raw = argv.StealList();
  const int argc = GDALGeneralCmdLineProcessor(CSLCount(raw), &raw, 0);
  CPLStringList processed(raw, TRUE);
  if (argc < 1) {
    throw Error(ErrorKind::k_usage, "the ogr2ogr command's general options are invalid");
  }
  std::vector<std::string> tokens;
  for (int i = 1; i < argc; ++i) {
    tokens.emplace_back(processed[i]);
  }
  SplitArguments split = split_program_arguments(GdalProgram::k_ogr2ogr, tokens);
  command.options = std::move(split.options);
  const std::vector<std::string>& positionals = split.positionals;
  if (positionals.size() < 2) {
    throw Error(ErrorKind::k_usage,
                "the ogr2ogr command needs a destination (PG:\"...\") and a "
                "source");
  }
  command.destination = positionals[0];
  command.source = positionals[1];
  command.layers.assign(positionals.begin() + 2, positionals.end());
  for (const auto& option : command.options) {
    if (option == "-upsert") {
      throw Error(ErrorKind::k_usage,
                  "-upsert is not supported by gdal-idem load: use --mode "
                  "append (rows of a bundle are replaced as a whole)");
    }
  }
  for (size_t i = 0; i < command.options.size(); i += 1 + arity_at(command.options, i)) {
    if (command.options[i] == "-overwrite") {
      command.mode_from_flags = LoadMode::k_replace;
    } else if (command.options[i] == "-append") {
      command.mode_from_flags = LoadMode::k_append;
    }
  }
  return command;
}

FeatureWork describe_feature_load(const Ogr2ogrCommand& command,
                                  const FeatureLoadSettings& settings) {
  FeatureWork work;
  work.namespace_name = settings.namespace_name;
  if (work.namespace_name.empty()) {
    throw Error(ErrorKind::k_usage, "the namespace is empty: give --namespace or IDEM_NAMESPACE");
  }
  check_label("the namespace (--namespace or IDEM_NAMESPACE)", work.namespace_name);
  if (settings.mode && command.mode_from_flags && *settings.mode != *command.mode_from_flags) {
    throw Error(ErrorKind::k_usage,
                std::string("--mode ") + load_mode_name(*settings.mode) +
                    " contradicts the command's -" +
                    (*command.mode_from_flags == LoadMode::k_append ? "append" : "overwrite"));
  }
  work.mode = settings.mode.value_or(command.mode_from_flags.value_or(LoadMode::k_replace));

  DatasetPtr source = open_vector(command.source, open_options_of(command.options));
  std::string layer_name;
  if (command.layers.size() == 1) {
    layer_name = command.layers[0];
  } else if (last_value(command.options, "-sql")) {
    layer_name = "sql_statement";
  } else if (command.layers.empty() && source->GetLayerCount() == 1) {
    layer_name = source->GetLayer(0)->GetName();
  }
  if (layer_name.empty() && !last_value(command.options, "-nln")) {
    throw Error(ErrorKind::k_usage,
                "the load must write one table: name it with -nln TABLE (and "
                "select one source layer)");
  }
  if (command.layers.size() > 1) {
    throw Error(ErrorKind::k_usage,
                "the load must write one table: give one source layer name, "
                "not " +
                    std::to_string(command.layers.size()));
  }
  work.target = resolve_target(command, layer_name);
  if (!work.target.schema) {
    // The schema the server resolves for this connection (its search_path, whether set by the
    // DSN's options, PGOPTIONS or the role's default), not the DSN's spelling: loads into two
    // schemas are two loads.
    if (!settings.current_schema) {
      throw Error(ErrorKind::k_usage,
                  "the target schema is not named (-lco SCHEMA=...) and "
                  "there is no connection to ask the server for it");
    }
    work.target.schema = settings.current_schema(work.target);
    if (work.target.schema->empty()) {
      throw Error(ErrorKind::k_usage,
                  "the target " + work.target.display +
                      " has no current schema (its search_path names none that exists): name it "
                      "with -nln SCHEMA.TABLE or -lco SCHEMA=...");
    }
    check_target_name("the target's current schema", *work.target.schema);
  }
  work.bundle = bundle_name(command.source);

  JsonValue description = JsonValue::object();
  description.set("kind", JsonValue::string("feature_load"));
  description.set("load_version", JsonValue::integer(k_feature_load_version));
  description.set("mode", JsonValue::string(load_mode_name(work.mode)));
  description.set("source", identity_of_files(source.get(), command.source, settings));
  if (work.mode == LoadMode::k_append) {
    // The bundle's rows are replaced as a whole by name: the name decides what is deleted.
    description.set("bundle", JsonValue::string(work.bundle));
  }
  JsonValue layers = JsonValue::array();
  for (const auto& layer : command.layers) {
    layers.push_back(JsonValue::string(layer));
  }
  description.set("layers", std::move(layers));
  description.set("options", key_options(command, settings));
  JsonValue config = JsonValue::object();
  for (const auto& [name, value] : command.config) {
    if (!config_is_attempt_only(name) && !names_a_secret(name)) {
      config.set(CPLString(name).toupper(), JsonValue::string(value));
    }
  }
  description.set("config", std::move(config));
  JsonValue target = JsonValue::object();
  target.set("database", work.target.database);
  target.set("schema", JsonValue::string(*work.target.schema));
  target.set("table", JsonValue::string(work.target.table));
  description.set("target", std::move(target));

  work.canonical_json = description.dump();
  work.key = compute_key(work.namespace_name, work.canonical_json);
  work.output_uri = work.target.display;
  if (work.mode == LoadMode::k_append) {
    work.output_uri += " bundle=" + work.bundle;
  }
  return work;
}

std::vector<std::string> staging_translate_options(const Ogr2ogrCommand& command,
                                                   const std::string& staging_layer) {
  static const std::set<std::string> k_dropped_flags = {"-progress", "-overwrite", "-append",
                                                        "-update"};
  const std::vector<std::string>& options = command.options;
  std::vector<std::string> out;
  for (size_t i = 0; i < options.size();) {
    const int arity = static_cast<int>(
        std::min<size_t>(static_cast<size_t>(arity_at(options, i)), options.size() - i - 1));
    const std::string& option = options[i];
    const bool dropped =
        k_dropped_flags.count(option) != 0 || option == "-nln" || option == "-f" ||
        option == "-of" ||
        (option == "-lco" && arity == 1 && option_name(options[i + 1]) == "OVERWRITE");
    if (!dropped) {
      for (int k = 0; k <= arity; ++k) {
        out.push_back(options[i + k]);
      }
    }
    i += 1 + arity;
  }
  out.push_back("-nln");
  out.push_back(staging_layer);
  out.push_back("-progress");
  for (const auto& layer : command.layers) {
    out.push_back(layer);
  }
  return out;
}

}  // namespace idem
