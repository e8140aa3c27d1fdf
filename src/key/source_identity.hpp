// SPDX-License-Identifier: MIT
// Source identity: what a source dataset *is* for the key, independent of where it lives.
// Every file of GDALDataset::GetFileList() (so .aux.xml/.ovr/.msk sidecars count), recursively
// through VRT sources, identified by digest_source_file(); never the path (docs/keys.md).
#pragma once

#include <map>
#include <optional>
#include <string>

#include "base/canonical_json.hpp"
#include "cpl_minixml.h"
#include "key/source_digest.hpp"

class GDALDataset;

namespace idem {

// How deep VRTs may name VRTs (files or datasets made in memory) before a walk of what a dataset
// reads gives up: the one limit of every such walk (the key's, the driver's).
inline constexpr int k_max_vrt_depth = 32;

// The datasets opened to identify the sources named in a VRT, kept open for the warp that follows
// so that it does not open each source again (a GDALOpen is a measurable part of a 256x256 tile,
// bench/RESULTS.md). Each holds one reference, released on destruction.
class KeptSources {
 public:
  KeptSources() = default;
  ~KeptSources();
  KeptSources(const KeptSources&) = delete;
  KeptSources& operator=(const KeptSources&) = delete;

  // Takes over the caller's reference; a second dataset under the same name is released.
  void keep(const std::string& name, GDALDataset* dataset);
  // Keeps a dataset without files (MEM) whose name another source of the work shares under a
  // name of its own: its name, then "#idem-held:" and the digest of its identity (held_identity),
  // so two with the same content get the same name and are the same for the key.
  // vrt_xml_for_key() then names it so wherever a VRT reads it.
  void keep_aliased(GDALDataset* dataset);
  // The identity of a dataset without files (what it holds: its pixels and all that describes
  // them), computed once per dataset whoever asks (its alias, the key).
  const JsonValue& held_identity(GDALDataset* dataset);
  // The dataset kept under exactly this name (as written in the VRT, resolved), or nullptr.
  GDALDataset* find(const std::string& name) const;
  // The name keep_aliased() gave `dataset`, "" when it gave none.
  std::string alias_of(GDALDataset* dataset) const;
  bool has_aliases() const { return !m_aliases.empty(); }

 private:
  std::map<std::string, GDALDataset*> m_datasets;
  std::map<GDALDataset*, std::string> m_aliases;
  std::map<GDALDataset*, JsonValue> m_held_identities;
};

// A file a work reads, as it was identified: `read_as` for local files (SourceDigest::read_as).
struct SourceFile {
  std::string path;
  std::optional<FileIdentity> read_as;
};

struct SourceIdentityOptions {
  SourceDigestPolicy policy = SourceDigestPolicy::k_auto;
  DigestCache* cache = nullptr;
  KeptSources* kept_sources = nullptr;            // null: each source is closed once identified
  std::vector<SourceFile>* seen_files = nullptr;  // when set, every file identified is added
};

// A VRT made in memory (its description empty or its own XML): no file holds its XML.
bool is_vrt_in_memory(GDALDataset* dataset);
// Whether a source is one the caller's handle stands for, since it cannot be opened again by its
// name: a dataset without files (MEM) or a VRT made in memory. The driver keeps such sources in
// KeptSources under their names, and the key and the warp take them from there.
bool held_not_reopened(GDALDataset* dataset);

// The xml:VRT of `vrt` as the key reads it: each source of its bands that `kept` keeps under an
// alias (KeptSources::keep_aliased) is named by it, in place of the name the two share. The
// sources are matched to the XML's source elements by their order in each band, the order
// GDAL writes them in. Without aliases (or `kept`), GDAL's xml:VRT as it is.
std::string vrt_xml_for_key(GDALDataset* vrt, const KeptSources* kept);

// Identity of an already open dataset:
//   {"files":[{"sha256_tree":"..."},...], "name":"NETCDF:\"{file}\":var"}
// "name" appears only when the dataset name is more than its first file (subdatasets, prefixes).
// Datasets without files (MEM) are identified by a digest of their pixels ("pixels_sha256").
JsonValue identity_of_dataset(GDALDataset* dataset, const SourceIdentityOptions& options);

// One file's entry: {"<method>": digest}, with "size" for header-based methods (an ETag or a
// store's checksum says nothing about the size by itself).
JsonValue source_digest_json(const SourceDigest& digest);

// The dataset named `name` opened as identity_of_source() opens it, and kept in `kept` (where
// an identity_of_source() of it then finds it); the one already kept under that name if any.
// Throws idem::Error(k_source) naming the source when it cannot be opened.
GDALDataset* open_and_keep_source(const std::string& name, KeptSources& kept);

// The rule for a source a VRT names that does not open (docs/keys.md, "Missing sources"): when
// `name` is no file at all, the key records its absence, {"missing": name}, since GDAL opens a
// VRT's sources only when it reads them; nullopt when something is there (a corrupt or
// unreadable file), whose failure to open stands. Every walk of a VRT's sources asks this.
std::optional<JsonValue> missing_source(const std::string& name);

// Identity of the dataset named `name` (a path or GDAL connection string) in a VRT, opened
// read-only (and kept in options.kept_sources when set); missing_source() when it does not open.
// Throws idem::Error(k_source) naming the source when it cannot be opened or read.
JsonValue identity_of_source(const std::string& name, const SourceIdentityOptions& options);

}  // namespace idem
