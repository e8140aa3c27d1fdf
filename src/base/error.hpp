// SPDX-License-Identifier: MIT
// The core library's error type. The core may throw it; the driver, the VSI handler and the CLI
// catch it at their boundary (CPLError / a message and a documented exit code).
#pragma once

#include <stdexcept>
#include <string>

namespace idem {

enum class ErrorKind {
  k_usage,   // bad input from the user: options, arguments, CRS, paths
  k_source,  // a source cannot be read or described
  k_ledger,  // the ledger cannot be reached or refused an operation
  k_io,      // writing, renaming or syncing an output failed
  k_internal,
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), m_kind(kind) {}
  ErrorKind kind() const { return m_kind; }

 private:
  ErrorKind m_kind;
};

// A ledger call that could not reach its database: the connection broke under it (a server or
// pooler restarted, a network cut; the call's outcome is unknown, and the ledger's next call
// reconnects), or connecting failed.
class LedgerUnreachable : public Error {
 public:
  explicit LedgerUnreachable(const std::string& message) : Error(ErrorKind::k_ledger, message) {}
};

// The output's destination was refused before any claim: not a path IDEM may write (a link, a
// directory, one of the sources, a directory it cannot write...). Nothing was touched.
class DestinationRefused : public Error {
 public:
  explicit DestinationRefused(const std::string& message) : Error(ErrorKind::k_usage, message) {}
};

// Another worker holds the work (or earlier work on the same output), and the caller asked to
// fail rather than wait (IDEM_ON_BUSY=FAIL).
class WorkBusy : public Error {
 public:
  explicit WorkBusy(const std::string& message) : Error(ErrorKind::k_ledger, message) {}
};

// This attempt's claim is gone (its lease ran out and another worker took the work over, or the
// ledger no longer has it): nothing of this attempt stays published or recorded.
class ClaimLost : public Error {
 public:
  explicit ClaimLost(const std::string& message) : Error(ErrorKind::k_ledger, message) {}
};

// An object store could not be asked about an output (the connection failed, or it answered 403,
// 429 or 5xx): the output is neither missing nor changed as far as IDEM knows, so nothing is
// decided on it; its ledger rows stay as they are (docs/cli.md, verify).
class StoreUnreachable : public Error {
 public:
  explicit StoreUnreachable(const std::string& message) : Error(ErrorKind::k_io, message) {}
};

// What kind of failure `error` is, as programs read it: "busy", "lost_claim",
// "refused_destination", "ledger_unreachable", "store_unreachable", "usage", "source", "ledger",
// "io" or "internal". The driver's ERROR_KIND (in upper case), the command's --json error object
// and the Python package's IdemError.kind all name failures this way.
const char* error_kind_name(const Error& error);

}  // namespace idem
