// SPDX-License-Identifier: MIT
// The IDEM raster driver: CreateCopy only. Claims the work in the ledger before any pixel is
// computed, writes through the real driver (FORMAT=) into a temporary file, renames it into
// place, completes the ledger row, and skips work that is already done.
#pragma once

namespace idem {

// Register the IDEM driver and install /vsiidem/ (idempotent).
void register_idem_driver();

}  // namespace idem
