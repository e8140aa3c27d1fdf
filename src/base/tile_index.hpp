// SPDX-License-Identifier: MIT
// A web-mercator tile's z/x/y, as the ledger records it for tile outputs.
#pragma once

namespace idem {

struct TileIndex {
  int z = 0;
  int x = 0;
  int y = 0;
};

}  // namespace idem
