// Source identity: what a source dataset *is* for the key, independent of where it lives.
// Every file of GDALDataset::GetFileList() (so .aux.xml/.ovr/.msk sidecars count), recursively
// through VRT sources, identified by digest_source_file(); never the path (docs/keys.md).
#pragma once

#include <string>

#include "core/canonical_json.hpp"
#include "core/source_digest.hpp"

class GDALDataset;

namespace idem {

struct SourceIdentityOptions {
  SourceDigestPolicy policy = SourceDigestPolicy::k_auto;
  DigestCache* cache = nullptr;
};

// Identity of an already open dataset:
//   {"files":[{"sha256_tree":"..."},...], "name":"NETCDF:\"{file}\":var"}
// "name" appears only when the dataset name is more than its first file (subdatasets, prefixes).
// Datasets without files (MEM) are identified by a digest of their pixels ("pixels_sha256").
JsonValue identity_of_dataset(GDALDataset* dataset, const SourceIdentityOptions& options);

// One file's entry: {"<method>": digest}, with "size" for header-based methods (an ETag or a
// store's checksum says nothing about the size by itself).
JsonValue source_digest_json(const SourceDigest& digest);

// Identity of the dataset named `name` (a path or GDAL connection string), opened read-only.
// Throws idem::Error(k_source) naming the source when it cannot be opened or read.
JsonValue identity_of_source(const std::string& name, const SourceIdentityOptions& options);

}  // namespace idem
