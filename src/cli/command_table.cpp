// SPDX-License-Identifier: MIT
// The command line's front (command_table.hpp).
#include "command_table.hpp"

#include <algorithm>
#include <cctype>

namespace idem::cli {

const std::vector<Command>& commands() {
  static const std::vector<Command> k_commands = {
      {"init", run_init, "init [--print]", "create or migrate the ledger schema"},
      {"key", run_key,
       "key [--json] [--mode replace|append] [--namespace N] -- gdalwarp|gdal_translate|ogr2ogr "
       "ARGS",
       "the key this command gets, without running it (--mode, --namespace: for ogr2ogr, as with "
       "load)"},
      {"status", run_status, "status [--namespace N] [--layer L]",
       "completed / in flight / stale / superseded counts"},
      {"inflight", run_inflight, "inflight [--all] [--namespace N] [--layer L]",
       "claims whose lease expired (--all: every claim)"},
      {"reap", run_reap,
       "reap [--older-than D] [--dry-run] [--requeue] [--namespace N] [--all-dirs]",
       "release stale claims, remove orphan .idem-tmp-* dirs"},
      {"verify", run_verify, "verify [--namespace N] [--layer L] [--checksum] [--dry-run]",
       "check completed outputs; drop the rows of bad ones"},
      {"explain", run_explain, "explain KEY_A KEY_B | --last OUTPUT",
       "why was this rebuilt: diff of two work descriptions"},
      {"forget", run_forget,
       "forget KEY | --output URI | --namespace N [--layer L] [--delete-output]",
       "delete ledger rows (then, optionally, the outputs)"},
      {"prune", run_prune,
       "prune --keep-latest | --older-than D [--drop-history D] [--namespace N] [--force]",
       "move completed rows into history, drop old history"},
      {"export", run_export,
       "export OUT.gpkg|OUT.geojson [--namespace N] [--layer L]\n"
       "      or: export --format stac DIR [--namespace N] [--layer L]",
       "the ledger as a vector layer with tile footprints, or the completed outputs as a static "
       "STAC catalog"},
      {"load", run_load, "load [--mode replace|append] [--namespace N] -- ogr2ogr ARGS",
       "an idempotent ogr2ogr load into PostgreSQL/PostGIS"},
      {"pending", run_pending, "pending [--null] [--count] [FILE|-]",
       "the batch's command lines whose work is not done"},
  };
  return k_commands;
}

const Command* find_command(const std::string& name) {
  for (const Command& command : commands()) {
    if (name == command.name) {
      return &command;
    }
  }
  return nullptr;
}

namespace {

constexpr const char* k_global_options =
    "Global options (before or after the command's name, up to a \"--\"):\n"
    "  --ledger DSN   sqlite:PATH, postgresql://..., or a libpq keyword string\n"
    "                 (default: IDEM_LEDGER, else ~/.local/state/gdal-idem/ledger.sqlite)\n"
    "  --json         machine-readable output (and errors as {\"error\": {\"kind\", "
    "\"message\"}})\n"
    "  -q             no progress output\n"
    "  --version      print versions and exit\n"
    "  -h, --help     this help; after a command's name, that command's\n";

constexpr const char* k_exit_codes =
    "Exit codes: 0 fine, 1 problems found, 2 usage error (or no ledger there), 3 the ledger\n"
    "cannot be reached now. Durations: 90s, 15m, 2h, 7d or plain seconds. docs/cli.md says more.\n";

// How many single-character insertions, deletions or substitutions turn `a` into `b`.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) {
    row[j] = j;
  }
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The options a synopsis names ("--namespace", "--older-than"...).
std::vector<std::string> options_of(const std::string& synopsis) {
  std::vector<std::string> options;
  for (size_t at = synopsis.find("--"); at != std::string::npos; at = synopsis.find("--", at + 2)) {
    size_t end = at + 2;
    while (end < synopsis.size() &&
           (std::isalnum(static_cast<unsigned char>(synopsis[end])) || synopsis[end] == '-')) {
      ++end;
    }
    if (end > at + 2) {
      options.push_back(synopsis.substr(at, end - at));
    }
  }
  return options;
}

}  // namespace

CommandLine parse_command_line(const Args& words, GlobalOptions defaults) {
  CommandLine line;
  line.global = std::move(defaults);
  bool wrapped = false;  // after "--": the wrapped command's own words
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& word = words[i];
    if (wrapped || word == "--") {
      wrapped = true;  // "--" itself is kept: key and load find the wrapped command after it
      line.args.push_back(word);
    } else if (word == "--ledger") {
      if (i + 1 >= words.size()) {
        throw UsageError{
            "--ledger needs a DSN (sqlite:PATH, postgresql://..., or a libpq "
            "keyword string)"};
      }
      line.global.ledger_dsn = words[++i];
    } else if (word == "--json") {
      line.global.json = true;
    } else if (word == "-q" || word == "--quiet") {
      line.global.quiet = true;
    } else if (word == "-h" || word == "--help" || (line.command.empty() && word == "help")) {
      line.help = true;
    } else if (word == "--version" && line.command.empty()) {
      line.version = true;
    } else if (line.command.empty()) {
      line.command = word;
    } else {
      line.args.push_back(word);
    }
  }
  return line;
}

std::string usage_text() {
  std::string text = "Usage: gdal-idem [GLOBAL OPTIONS] COMMAND [ARGS...]\n\nCommands:\n";
  for (const Command& command : commands()) {
    text += "  " + std::string(command.synopsis) + "\n      " + command.summary + "\n";
  }
  return text + "\n" + k_global_options + "\n" + k_exit_codes;
}

std::string command_help(const Command& command) {
  return "Usage: gdal-idem [GLOBAL OPTIONS] " + std::string(command.synopsis) + "\n\n" +
         command.summary + ".\n\n" + k_global_options + "\n" + k_exit_codes;
}

std::string did_you_mean(const std::string& typed, const Command* command) {
  std::vector<std::string> known;
  if (command == nullptr) {
    for (const Command& each : commands()) {
      known.emplace_back(each.name);
    }
  } else {
    known = options_of(command->synopsis);
  }
  std::string best;
  size_t best_distance = 3;
  for (const std::string& name : known) {
    const size_t distance = edit_distance(typed, name);
    if (distance < best_distance) {
      best = name;
      best_distance = distance;
    }
  }
  return best.empty() ? std::string() : " (did you mean " + best + "?)";
}

}  // namespace idem::cli
