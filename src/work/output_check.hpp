// SPDX-License-Identifier: MIT
// Whether a completed output is still the one its completion recorded: the fingerprint of its
// primary file and the list of the files it consists of. The IDEM driver asks before it skips;
// `gdal-idem pending` and `verify` ask the same question without running the driver.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/directory_handle.hpp"
#include "cpl_port.h"
#include "gdal_priv.h"
#include "ledger/ledger.hpp"
#include "store/object_store.hpp"
#include "work/local_publisher.hpp"

namespace idem {

// Local files: size and mtime. Objects: size and ETag, asked of the store now (never GDAL's
// cached properties, which another worker's upload may have made stale). nullopt when the file
// is not there (or an object has no ETag).
std::optional<OutputFingerprint> fingerprint_of(const std::string& path);

// Does the output still match what the ledger recorded at completion? An object matched by the
// bytes behind a predicted ETag sets `store_etag` (if given) to the store's own.
bool output_matches(const std::string& path, const OutputFingerprint& recorded,
                    std::string* store_etag);

// Whether the object whose headers are `headers` is the one `recorded` describes.
bool headers_match(const std::string& path, const ObjectHeaders& headers,
                   const OutputFingerprint& recorded);

// Whether the driver would skip this work instead of redoing it: `row` is a completed, not
// superseded completion that wrote `destination` (absolute, as the driver names it), the output
// there still matches the fingerprint recorded at completion, it opens in GDAL, and the files
// it consists of are those recorded (output_members_json). When an object matched by its bytes
// rather than a predicted ETag, `store_etag` (if given) gets the store's ETag, for the caller to
// record with Ledger::replace_etag; `opened` (if given) gets the output opened read-only.
bool completed_output_is_current(const LedgerRow& row, const std::string& destination,
                                 std::string* store_etag = nullptr,
                                 GDALDatasetUniquePtr* opened = nullptr);

// The output at `primary` opened read-only by GDAL for a skip or a check, after a look (lstat,
// through its directory's handle) at every name in its directory that GDAL could take for one of
// its files (its stem followed by '.' or '_'): when one of them is anything but a regular file (a
// FIFO planted there would hang the open, a device, a link), nothing is opened, `refusal` (when
// given) says which, and the output counts as changed. GDAL is handed the names looked at as the
// directory's files, so it lists nothing again and opens nothing that was not looked at. Objects
// and directory datasets are opened as they are. nullptr when GDAL cannot open it.
GDALDatasetUniquePtr open_output_for_check(const std::string& primary, std::string* refusal);

// The output's files other than `primary` (its sidecars), as recorded at completion: canonical
// JSON, [{"path","size","mtime_ns"}] locally, [{"path","size","etag"}] on object storage, sorted
// by path. nullopt when one of them cannot be looked at (gone meanwhile).
std::optional<std::string> output_members_json(const std::string& primary, CSLConstList files);

// A directory dataset's (Zarr's) files as a completion records them (its tree member): how many,
// their total size, and a SHA-256 of their relative paths, sizes and mtimes, so that any file
// added under it, removed or rewritten changes it. Walked through handles, never through a link.
struct TreeSummary {
  int64_t files = 0;
  int64_t size = 0;
  std::string sha256;
};
// The tree of the directory `name` in `parent`; nullopt when it is not a directory (a link is
// not followed).
std::optional<TreeSummary> tree_summary_at(const DirectoryHandle& parent, const std::string& name);

// The tree a completion recorded for the directory dataset at `destination` (its tree member's
// tree_sha256), or nullopt when `row` records none there.
std::optional<std::string> recorded_tree_of(const LedgerRow& row, const std::string& destination);

// One of the files other than the primary that a completion recorded (output_members_json, read
// back): a local file's size and mtime, an object's size and ETag, or a directory dataset's
// tree (`tree`, neither).
struct RecordedMember {
  std::string path;
  int64_t size = -1;
  std::optional<int64_t> mtime_ns;
  std::optional<std::string> etag;
  bool tree = false;
};
// The members `recorded` holds; nullopt for a row completed before they were recorded.
std::optional<std::vector<RecordedMember>> recorded_members(const OutputFingerprint& recorded);

// The local files the completions recorded at `destination` (its completed rows, superseded
// ones too): their sidecars, and with `primaries` their primary files too. Empty for an object
// output. What a publish moves aside, and what an abandoned publish's leftovers restore.
std::vector<KnownFile> recorded_local_files(WorkerLedger& ledger, const std::string& destination,
                                            bool primaries);

// Invariant I1 for an object: deletes the object at `path` only while the store shows the one
// `expected` describes (its size and ETag, asked now), and not while it matches one of
// `also_recorded` (a completion that records those very bytes). Where the store takes it
// (conditional_delete_applies: S3), the delete itself is conditional on the ETag just seen, so
// an object another writer put there after the look stays. Elsewhere the look and the delete
// are two requests; `only_if_conditional` then deletes nothing (k_not_ours): a worker taking
// back its upload must not risk deleting a successor's object. k_absent when the store says
// nothing is there, k_not_ours when something else is, k_failed when the store could not be
// looked at or refused the delete (`why`, when given, says what it answered). Used by `forget
// --delete-output` and by a worker taking back what it uploaded after its claim was lost.
DeleteOutcome delete_recorded_object(const std::string& path, const OutputFingerprint& expected,
                                     const std::vector<OutputFingerprint>& also_recorded = {},
                                     bool only_if_conditional = false, std::string* why = nullptr);

// The same JSON for local files just published (their sizes and mtimes known): every file of
// `files` but `primary`.
std::string local_members_json(const std::vector<PublishedFile>& files, const std::string& primary);

// Whether `output`, opened at `primary`, consists of the files `recorded` at completion: every
// file it lists now is one of them, and every one of them (listed or not: MRF lists only its
// .mrf) is there unchanged. Always true for a row completed before they were recorded.
bool output_members_unchanged(GDALDataset& output, const std::string& primary,
                              const OutputFingerprint& recorded);

}  // namespace idem
