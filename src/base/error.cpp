// SPDX-License-Identifier: MIT
// The kinds of failure as programs read them (error.hpp).
#include "base/error.hpp"

namespace idem {

const char* error_kind_name(const Error& error) {
  if (dynamic_cast<const WorkBusy*>(&error) != nullptr) {
    return "busy";
  }
  if (dynamic_cast<const ClaimLost*>(&error) != nullptr) {
    return "lost_claim";
  }
  if (dynamic_cast<const DestinationRefused*>(&error) != nullptr) {
    return "refused_destination";
  }
  if (dynamic_cast<const LedgerUnreachable*>(&error) != nullptr) {
    return "ledger_unreachable";
  }
  if (dynamic_cast<const StoreUnreachable*>(&error) != nullptr) {
    return "store_unreachable";
  }
  switch (error.kind()) {
    case ErrorKind::k_usage:
      return "usage";
    case ErrorKind::k_source:
      return "source";
    case ErrorKind::k_ledger:
      return "ledger";
    case ErrorKind::k_io:
      return "io";
    case ErrorKind::k_internal:
      break;
  }
  return "internal";
}

}  // namespace idem
