// SPDX-License-Identifier: MIT
// The gdal-idem command line's front: the one parser of the global options, the table of the
// subcommands (their synopses make the usage text, each command's --help, and the "did you
// mean" of a mistyped command or option), and how an error becomes a message, an exit code and,
// with --json, an error object.
#pragma once

#include <string>
#include <vector>

#include "cli.hpp"

namespace idem::cli {

// One subcommand: its name, what runs it, its synopsis (after "gdal-idem") and what it does.
struct Command {
  const char* name;
  int (*run)(const Args& args, const GlobalOptions& global);
  const char* synopsis;
  const char* summary;
};

// Every subcommand, in the order the usage text lists them.
const std::vector<Command>& commands();
// The command named `name`, or nullptr.
const Command* find_command(const std::string& name);

// The command line as typed: the global options (--ledger, --json, -q) wherever they stand before
// a "--" (before the command's name or after it, as users type `gdal-idem status --json`), the
// command's name and its own arguments; --help or -h anywhere before a "--" asks for help
// (the command's, or the whole usage without a command), --version for the versions.
struct CommandLine {
  GlobalOptions global;
  std::string command;
  Args args;
  bool help = false;
  bool version = false;
};
// Throws UsageError: a global option without its value.
CommandLine parse_command_line(const Args& words, GlobalOptions defaults);

// The whole usage text, and one command's.
std::string usage_text();
std::string command_help(const Command& command);

// " (did you mean X?)" for `typed`, a mistyped command or (with `command`) one of its options,
// when one is near enough (at most two edits); "" otherwise.
std::string did_you_mean(const std::string& typed, const Command* command = nullptr);

}  // namespace idem::cli
