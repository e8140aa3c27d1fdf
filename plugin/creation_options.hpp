// SPDX-License-Identifier: MIT
// The IDEM driver's creation options and configuration options: what a CreateCopy call asks
// for (the output driver, namespace, layer, tile, the options passed through), as
// docs/configuration.md documents them.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/tile_index.hpp"
#include "gdal_priv.h"
#include "key/source_digest.hpp"

namespace idem {

inline constexpr const char* k_driver_name = "IDEM";
inline constexpr int k_default_stale_seconds = 300;

struct IdemOptions {
  std::string format = "GTiff";
  std::string namespace_name = "default";
  std::optional<std::string> layer;
  std::optional<TileIndex> tile;
  std::vector<std::pair<std::string, std::string>> passthrough;  // as given
  std::string ledger_dsn;
  std::chrono::seconds lease{k_default_stale_seconds};
  bool fail_when_busy = false;
  bool durable = true;
  bool dry_run = false;
  SourceDigestPolicy digest_policy = SourceDigestPolicy::k_auto;
  bool include_gdal_version = false;
};

// The creation options of one call, with the configuration options they override. Throws
// k_usage naming the option that is wrong.
IdemOptions parse_options(CSLConstList creation_options);
// The FORMAT driver, refused (k_usage) when it cannot be IDEM's output driver.
GDALDriver* find_format_driver(const std::string& format);
// GDAL_DMD_CREATIONOPTIONLIST.
const char* creation_option_list();
// IDEM's configuration options, declared to GDALs that warn about unknown ones.
void declare_config_options();

}  // namespace idem
