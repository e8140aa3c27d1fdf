// SPDX-License-Identifier: MIT
// gdal-idem pending [--null] [--count] [FILE|-]: the commands of a batch whose work is not done.
// Reads gdalwarp / gdal_translate command lines as a batch file holds them (shell words), keys
// each one in this process as `gdal-idem key` does, looks the key up in the ledger the command
// would use, and prints the lines the IDEM driver would not skip. A resumed batch then pays one
// process for its done work instead of one gdalwarp start per done command. Anything it cannot
// parse, key or check is printed (passed through) with a warning: a batch must never lose work.
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "cli.hpp"
#include "cli_json.hpp"
#include "cpl_conv.h"
#include "cpl_error.h"
#include "cpl_string.h"
#include "gdal.h"
#include "ledger/ledger.hpp"
#include "work/output_check.hpp"

namespace idem::cli {

namespace {

constexpr const char* k_pending_usage = "usage: gdal-idem pending [--null] [--count] [FILE|-]";

// ---------------------------------------------------------------------------------------------
// Shell words: the subset of POSIX sh that batch files of gdalwarp commands use (quotes,
// backslashes, comments, leading NAME=value assignments, redirections, line continuations).
// Anything whose words only a shell could tell (expansions, globs, pipelines, several commands)
// is refused, and the line is passed through for the shell to run.

struct ShellWord {
  std::string text;
  bool assignment = false;  // NAME=value with NAME and '=' unquoted
};

struct ShellLine {
  enum class Outcome { k_words, k_continued, k_refused };
  Outcome outcome = Outcome::k_words;
  std::vector<ShellWord> words;
  std::string reason;  // k_refused
};

bool is_name_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}
bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

// One pass over a line's text, word by word (split_shell_words). Each step returns the reason
// the line is refused, or nothing.
class ShellSplitter {
 public:
  explicit ShellSplitter(const std::string& text) : m_text(text) {}

  ShellLine run() {
    for (m_at = 0; m_at < m_text.size(); ++m_at) {
      if (m_line.outcome == ShellLine::Outcome::k_continued) {
        return m_line;
      }
      if (std::optional<std::string> refusal = step(m_text[m_at])) {
        return refuse(*refusal);
      }
    }
    if (m_line.outcome == ShellLine::Outcome::k_continued) {
      return m_line;
    }
    end_word();
    if (m_redirect_target) {
      return refuse("redirection without a target");
    }
    return m_line;
  }

 private:
  using Refusal = std::optional<std::string>;
  static constexpr const char* k_several = "several commands on one line";

  ShellLine refuse(const std::string& reason) {
    m_line.outcome = ShellLine::Outcome::k_refused;
    m_line.reason = reason;
    m_line.words.clear();
    return m_line;
  }

  // The character at m_at (steps that read more move m_at to the last one they read).
  Refusal step(char c) {
    if (c == ' ' || c == '\t') {
      end_word();
    } else if (c == '\n') {
      end_word();
      m_command_ended = !m_line.words.empty() || m_redirect_target;
    } else if (c == '#' && !m_in_word) {
      while (m_at + 1 < m_text.size() && m_text[m_at + 1] != '\n') {
        ++m_at;
      }
    } else if (c == '\\') {
      return escaped();
    } else if (c == '\'') {
      return single_quoted();
    } else if (c == '"') {
      return double_quoted();
    } else if (c == '$' || c == '`') {
      return std::string("shell expansion (") + c + ")";
    } else if (c == '|' || c == '&' || c == ';' || c == '(' || c == ')') {
      return std::string("shell operator '") + c + "'";
    } else if (c == '<' || c == '>') {
      return redirection(c);
    } else if (c == '*' || c == '?' || c == '[') {
      return std::string("unquoted glob character '") + c + "'";
    } else if (c == '~' && !m_in_word) {
      return std::string("tilde expansion (~)");
    } else if (!append(c, false)) {
      return std::string(k_several);
    }
    return std::nullopt;
  }

  bool append(char c, bool quoted) {
    if (m_command_ended) {
      return false;
    }
    if (!m_eq_seen) {
      if (c == '=' && !quoted) {
        m_eq_seen = true;
      } else if (quoted) {
        m_quoted_before_eq = true;
      }
    }
    if (quoted || !std::isdigit(static_cast<unsigned char>(c))) {
      m_digits_only = false;
    }
    m_word += c;
    m_in_word = true;
    return true;
  }

  void end_word() {
    if (!m_in_word) {
      return;
    }
    if (m_redirect_target) {
      m_redirect_target = false;  // `2>>log.txt`: not an argument of the program
    } else {
      ShellWord shell_word{m_word, false};
      const size_t eq = m_word.find('=');
      if (m_eq_seen && !m_quoted_before_eq && eq > 0 && is_name_start(m_word[0])) {
        shell_word.assignment = true;
        for (size_t i = 1; i < eq; ++i) {
          shell_word.assignment = shell_word.assignment && is_name_char(m_word[i]);
        }
      }
      m_line.words.push_back(shell_word);
    }
    m_word.clear();
    m_in_word = false;
    m_digits_only = true;
    m_quoted_before_eq = false;
    m_eq_seen = false;
  }

  // A quoted part of a word starts.
  Refusal start_quote() {
    if (m_command_ended) {
      return std::string(k_several);
    }
    m_in_word = true;
    m_digits_only = false;
    m_quoted_before_eq = m_quoted_before_eq || !m_eq_seen;
    return std::nullopt;
  }

  Refusal escaped() {
    if (m_at + 1 >= m_text.size()) {
      m_line.outcome = ShellLine::Outcome::k_continued;
      return std::nullopt;
    }
    ++m_at;
    if (m_text[m_at] != '\n' && !append(m_text[m_at], true)) {
      return std::string(k_several);
    }
    return std::nullopt;
  }

  Refusal single_quoted() {
    const size_t close = m_text.find('\'', m_at + 1);
    if (close == std::string::npos) {
      return std::string("unterminated single quote");
    }
    if (Refusal refusal = start_quote()) {
      return refusal;
    }
    for (size_t j = m_at + 1; j < close; ++j) {
      append(m_text[j], true);
    }
    m_at = close;
    return std::nullopt;
  }

  Refusal double_quoted() {
    if (Refusal refusal = start_quote()) {
      return refusal;
    }
    const size_t n = m_text.size();
    for (++m_at; m_at < n; ++m_at) {
      const char c = m_text[m_at];
      if (c == '"') {
        return std::nullopt;
      }
      if (c == '$' || c == '`') {
        return std::string("shell expansion (") + c + ") inside double quotes";
      }
      if (c == '\\' && m_at + 1 < n && std::strchr("$`\"\\\n", m_text[m_at + 1]) != nullptr) {
        ++m_at;
        if (m_text[m_at] == '\n') {
          continue;
        }
      }
      append(m_text[m_at], true);
    }
    return std::string("unterminated double quote");
  }

  Refusal redirection(char c) {
    if (m_command_ended) {
      return std::string(k_several);
    }
    if (m_in_word && m_digits_only) {
      m_word.clear();  // the file descriptor of `2>log`
      m_in_word = false;
    }
    end_word();
    if (m_redirect_target) {
      return std::string("redirection without a target");
    }
    // >, >>, >|, <, <>, and the descriptor forms >&N, <&N (N a number or -)
    const size_t n = m_text.size();
    if (m_at + 1 < n &&
        (m_text[m_at + 1] == '>' || m_text[m_at + 1] == '|' || m_text[m_at + 1] == '&') &&
        !(c == '<' && m_text[m_at + 1] == '|')) {
      ++m_at;
    }
    m_redirect_target = true;
    return std::nullopt;
  }

  const std::string& m_text;
  size_t m_at = 0;
  ShellLine m_line;
  std::string m_word;
  bool m_in_word = false;
  bool m_digits_only = true;        // an unquoted run of digits before '<' or '>' is a file number
  bool m_quoted_before_eq = false;  // a quoted or escaped character came before the first '='
  bool m_eq_seen = false;
  bool m_redirect_target = false;  // the next word is a redirection's target, not an argument
  bool m_command_ended = false;    // an unquoted newline ended the command
};

ShellLine split_shell_words(const std::string& text) {
  return ShellSplitter(text).run();
}

// ---------------------------------------------------------------------------------------------
// Per-command configuration: a command's `--config` options and NAME=value assignments hold for
// that command only.

class ConfigScope {
 public:
  ConfigScope() : m_saved(CPLGetConfigOptions(), TRUE) {}
  ~ConfigScope() { CPLSetConfigOptions(m_saved.List()); }
  ConfigScope(const ConfigScope&) = delete;
  ConfigScope& operator=(const ConfigScope&) = delete;

 private:
  CPLStringList m_saved;
};

// GDAL's general options other than --config and --debug print (--version, --formats...),
// wait for the terminal (--pause), read files of arguments (--optfile) or change the process
// (--locale, --mempreload): not evaluated here.
std::optional<std::string> unsupported_general_option(const Args& command) {
  for (size_t i = 1; i < command.size(); ++i) {
    const std::string& token = command[i];
    if (token == "--config") {
      i += 2;
    } else if (token == "--debug") {
      i += 1;
    } else if (token.size() > 2 && token.compare(0, 2, "--") == 0) {
      return token;
    }
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// Reading records: lines (with backslash continuations), or NUL-terminated records.

class RecordReader {
 public:
  RecordReader(std::istream& input, bool null_separated)
      : m_input(input), m_null_separated(null_separated) {}

  // The next record and the number of its first line; false at the end of the input.
  bool next(std::string& record, size_t& line_number) {
    record.clear();
    std::string piece;
    const char separator = m_null_separated ? '\0' : '\n';
    if (!std::getline(m_input, piece, separator)) {
      return false;
    }
    line_number = ++m_line;
    record = piece;
    // A line ending in a backslash continues on the next one, as in a shell script.
    while (!m_null_separated && ends_in_continuation(record) &&
           std::getline(m_input, piece, separator)) {
      ++m_line;
      record += '\n';
      record += piece;
    }
    return true;
  }

 private:
  // Whether the text ends in a backslash that escapes the newline (outside single quotes and
  // comments), so the command goes on on the next line.
  static bool ends_in_continuation(const std::string& text) {
    char quote = 0;
    for (size_t i = 0; i < text.size(); ++i) {
      const char c = text[i];
      if (quote == '\'') {
        if (c == '\'') {
          quote = 0;
        }
      } else if (c == '\\') {
        if (i + 1 == text.size()) {
          return true;
        }
        ++i;
      } else if (quote == '"') {
        if (c == '"') {
          quote = 0;
        }
      } else if (c == '\'' || c == '"') {
        quote = c;
      } else if (c == '#' && (i == 0 || std::isspace(static_cast<unsigned char>(text[i - 1])))) {
        const size_t newline = text.find('\n', i);
        if (newline == std::string::npos) {
          return false;
        }
        i = newline;
      }
    }
    return false;
  }

  std::istream& m_input;
  bool m_null_separated;
  size_t m_line = 0;
};

// ---------------------------------------------------------------------------------------------
// The check

struct Counts {
  size_t done = 0;
  size_t pending = 0;
  size_t unparsed = 0;
};

class PendingFilter {
 public:
  PendingFilter(bool null_separated, bool json_counts)
      : m_null_separated(null_separated), m_json_counts(json_counts) {}

  void handle(const std::string& record, size_t line_number);
  void print_counts() const;

 private:
  enum class Verdict { k_done, k_pending };
  Verdict check(const std::vector<ShellWord>& words);
  Ledger& ledger_for(const std::string& dsn);
  void emit(const std::string& record);
  void pass_through(const std::string& record, size_t line_number, const std::string& reason);

  bool m_null_separated;
  bool m_json_counts;
  Counts m_counts;
  std::map<std::string, std::unique_ptr<Ledger>> m_ledgers;
  std::map<std::string, std::string> m_unreachable;  // DSN -> why it could not be opened
};

struct PassThrough {
  std::string reason;
};

void PendingFilter::handle(const std::string& record, size_t line_number) {
  const ShellLine line = split_shell_words(record);
  if (line.outcome == ShellLine::Outcome::k_continued) {
    return pass_through(record, line_number, "the last line ends with a backslash");
  }
  if (line.outcome == ShellLine::Outcome::k_refused) {
    return pass_through(record, line_number, line.reason + ", which only a shell evaluates");
  }
  if (line.words.empty()) {
    return;  // blank or a comment: no work
  }
  try {
    if (check(line.words) == Verdict::k_done) {
      ++m_counts.done;
      return;
    }
  } catch (const PassThrough& why) {
    return pass_through(record, line_number, why.reason);
  } catch (const UsageError& error) {
    return pass_through(record, line_number, error.message);
  } catch (const std::exception& error) {
    return pass_through(record, line_number, error.what());
  }
  ++m_counts.pending;
  emit(record);
}

PendingFilter::Verdict PendingFilter::check(const std::vector<ShellWord>& words) {
  ConfigScope scope;
  Args command;
  for (const auto& word : words) {
    if (command.empty() && word.assignment) {
      // NAME=value before the program: that command's environment, where GDAL and IDEM read
      // their configuration (IDEM_LEDGER, IDEM_NAMESPACE...).
      const size_t eq = word.text.find('=');
      CPLSetConfigOption(word.text.substr(0, eq).c_str(), word.text.substr(eq + 1).c_str());
    } else {
      command.push_back(word.text);
    }
  }
  if (command.empty()) {
    throw PassThrough{"no command, only variable assignments"};
  }
  if (const auto option = unsupported_general_option(command)) {
    throw PassThrough{"the general option " + *option + " is not evaluated"};
  }

  Ledger* ledger = nullptr;
  CommandKey key;
  {
    CPLErrorHandlerPusher quiet(CPLQuietErrorHandler);  // the reasons reach the warning instead
    // The ledger's persistent digest cache spares hashing sources the real runs (or earlier
    // lines) hashed already.
    CPLConfigOptionSetter digest_cache("IDEM_DRY_RUN_DIGEST_CACHE", "LEDGER", true);
    key = key_raster_command(command, [&]() {
      // The ledger the command would use, its --config options applied.
      ledger = &ledger_for(CPLGetConfigOption("IDEM_LEDGER", ""));
    });
  }

  // The driver's own skip decision, then the open its skip does: an output the driver would
  // skip to but not open fails the command, so it is printed for the batch to report.
  // (completed_output_is_current opens it, looking first at the names GDAL would open beside
  // it: a FIFO planted there makes it pending, never a hang.)
  const LedgerRow row = ledger->lookup(key.key);
  GDALDatasetUniquePtr output;
  if (!completed_output_is_current(row, key.destination, nullptr, &output)) {
    return Verdict::k_pending;
  }
  CPLErrorReset();
  return Verdict::k_done;
}

Ledger& PendingFilter::ledger_for(const std::string& dsn) {
  const auto found = m_ledgers.find(dsn);
  if (found != m_ledgers.end()) {
    return *found->second;
  }
  const auto failed = m_unreachable.find(dsn);
  if (failed != m_unreachable.end()) {
    throw PassThrough{failed->second};
  }
  try {
    return *m_ledgers.emplace(dsn, Ledger::open_read_only(dsn)).first->second;
  } catch (const Error& error) {
    const std::string label =
        dsn.empty() ? "sqlite:" + Ledger::default_sqlite_path() : Ledger::redact_dsn(dsn);
    m_unreachable[dsn] = "the ledger " + label + " cannot be used: " + error.what();
    throw PassThrough{m_unreachable[dsn]};
  }
}

void PendingFilter::emit(const std::string& record) {
  std::fwrite(record.data(), 1, record.size(), stdout);
  std::fputc(m_null_separated ? '\0' : '\n', stdout);
  std::fflush(stdout);  // workers start on the first lines while the rest are checked
}

void PendingFilter::pass_through(const std::string& record, size_t line_number,
                                 const std::string& reason) {
  std::fprintf(stderr, "gdal-idem pending: %s %zu: passed through: %s\n",
               m_null_separated ? "record" : "line", line_number, reason.c_str());
  ++m_counts.unparsed;
  emit(record);
}

void PendingFilter::print_counts() const {
  if (m_json_counts) {
    std::fprintf(
        stderr, "%s\n",
        json::object({{"done", json::integer(static_cast<int64_t>(m_counts.done))},
                      {"pending", json::integer(static_cast<int64_t>(m_counts.pending))},
                      {"unparsed", json::integer(static_cast<int64_t>(m_counts.unparsed))}})
            .c_str());
  } else {
    std::fprintf(stderr, "gdal-idem pending: %zu done, %zu pending, %zu unparsed\n", m_counts.done,
                 m_counts.pending, m_counts.unparsed);
  }
}

}  // namespace

int run_pending(const Args& args, const GlobalOptions& global) {
  bool null_separated = false;
  bool count = false;
  std::optional<std::string> input_path;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--null" || arg == "-0") {
      null_separated = true;
    } else if (arg == "--count") {
      count = true;
    } else if (arg == "--") {
      if (i + 2 < args.size() || input_path) {
        throw UsageError{std::string("one batch file at most; ") + k_pending_usage};
      }
      if (i + 1 < args.size()) {
        input_path = args[i + 1];
      }
      break;
    } else if (arg.size() > 1 && arg[0] == '-') {
      throw UsageError{"unknown option '" + arg + "'; " + k_pending_usage};
    } else if (input_path) {
      throw UsageError{std::string("one batch file at most; ") + k_pending_usage};
    } else {
      input_path = arg;
    }
  }
  std::ifstream file;
  if (input_path && *input_path != "-") {
    file.open(*input_path, std::ios::binary);
    if (!file) {
      throw UsageError{"cannot read " + *input_path + ": " + std::strerror(errno)};
    }
  }
  std::istream& input = file.is_open() ? static_cast<std::istream&>(file) : std::cin;

  // --ledger stands for the IDEM_LEDGER the batch's commands run with; a command's own
  // --config IDEM_LEDGER still wins, as it does when the command runs.
  if (!global.ledger_dsn.empty()) {
    CPLSetConfigOption("IDEM_LEDGER", global.ledger_dsn.c_str());
  }
  PendingFilter filter(null_separated, global.json);
  RecordReader reader(input, null_separated);
  std::string record;
  size_t line_number = 0;
  while (reader.next(record, line_number)) {
    filter.handle(record, line_number);
  }
  if (input.bad()) {
    throw Error(ErrorKind::k_usage,
                "reading the batch failed: " + std::string(std::strerror(errno)));
  }
  if (count) {
    filter.print_counts();
  }
  return k_exit_ok;
}

}  // namespace idem::cli
