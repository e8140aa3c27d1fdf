// SPDX-License-Identifier: MIT
// Whether a completed output is still the one its completion recorded (output_check.hpp).
#include "work/output_check.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <set>
#include <utility>

#include "base/canonical_json.hpp"
#include "base/file_identity.hpp"
#include "base/paths.hpp"
#include "base/sha256.hpp"
#include "cpl_error.h"
#include "cpl_string.h"
#include "cpl_vsi.h"
#include "work/lease.hpp"

namespace idem {

namespace {

// One file of an output's members (output_members_json): a local file's size and mtime, an
// object's size and ETag.
JsonValue member_entry(const std::string& path, int64_t size, int64_t mtime_ns,
                       const std::string* etag) {
  JsonValue member = JsonValue::object();
  member.set("path", JsonValue::string(path));
  member.set("size", JsonValue::integer(size));
  if (etag != nullptr) {
    member.set("etag", JsonValue::string(*etag));
  } else {
    member.set("mtime_ns", JsonValue::integer(mtime_ns));
  }
  return member;
}

bool is_local_directory(const std::string& path) {
  struct stat info {};
  return !is_object_store_path(path) && ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

// Every regular file under `directory`, as "relative path\tsize\tmtime_ns" lines; directories
// opened without following a link, links and special files left out.
void list_tree(const DirectoryHandle& directory, const std::string& relative,
               std::vector<std::string>& lines, int64_t& total) {
  for (const std::string& name : directory.entries().value_or(std::vector<std::string>())) {
    const std::optional<struct stat> info = directory.look(name);
    if (!info) {
      continue;
    }
    const std::string inside = relative.empty() ? name : relative + "/" + name;
    if (S_ISDIR(info->st_mode)) {
      if (const std::optional<DirectoryHandle> inner = directory.child(name)) {
        list_tree(*inner, inside, lines, total);
      }
    } else if (S_ISREG(info->st_mode)) {
      lines.push_back(inside + "\t" + std::to_string(info->st_size) + "\t" +
                      std::to_string(mtime_ns_of(*info)));
      total += info->st_size;
    }
  }
}

// A directory dataset's files as one member (TreeSummary).
JsonValue tree_member(const std::string& directory) {
  std::optional<TreeSummary> tree;
  try {
    if (const std::optional<DirectoryHandle> parent =
            DirectoryHandle::open(dirname_of(directory))) {
      tree = tree_summary_at(*parent, basename_of(directory));
    }
  } catch (const UnsafePath&) {
    // a link another user made on the way: nothing is read through it
  }
  JsonValue member = JsonValue::object();
  member.set("path", JsonValue::string(directory));
  member.set("files", JsonValue::integer(tree ? tree->files : 0));
  member.set("size", JsonValue::integer(tree ? tree->size : 0));
  member.set("tree_sha256", JsonValue::string(tree ? tree->sha256 : std::string()));
  return member;
}

std::string members_text(JsonValue::Array members) {
  std::sort(members.begin(), members.end(), [](const JsonValue& a, const JsonValue& b) {
    return a.find("path")->text() < b.find("path")->text();
  });
  return JsonValue::array(std::move(members)).dump();
}

}  // namespace

std::optional<TreeSummary> tree_summary_at(const DirectoryHandle& parent, const std::string& name) {
  const std::optional<DirectoryHandle> directory = parent.child(name);
  if (!directory) {
    return std::nullopt;
  }
  std::vector<std::string> lines;
  TreeSummary tree;
  list_tree(*directory, "", lines, tree.size);
  std::sort(lines.begin(), lines.end());
  Sha256 hasher;
  for (const std::string& line : lines) {
    hasher.update(line);
    hasher.update("\n");
  }
  tree.files = static_cast<int64_t>(lines.size());
  tree.sha256 = hasher.finish_hex();
  return tree;
}

std::optional<std::string> recorded_tree_of(const LedgerRow& row, const std::string& destination) {
  if (!row.fingerprint || row.output_uri != destination) {
    return std::nullopt;
  }
  const std::optional<JsonValue> parsed =
      row.fingerprint->members ? JsonValue::parse(*row.fingerprint->members) : std::nullopt;
  if (!parsed || !parsed->is_array()) {
    return std::nullopt;
  }
  for (const JsonValue& entry : parsed->items()) {
    const JsonValue* path = entry.find("path");
    const JsonValue* tree = entry.find("tree_sha256");
    if (path != nullptr && tree != nullptr && path->text() == destination) {
      return tree->text();
    }
  }
  return std::nullopt;
}

std::optional<OutputFingerprint> fingerprint_of(const std::string& path) {
  if (is_object_store_path(path)) {
    const auto headers = object_headers(path, true);
    if (!headers || headers->etag.empty()) {
      return std::nullopt;  // no ETag: nothing to compare a later state with
    }
    OutputFingerprint fingerprint;
    fingerprint.size = headers->size;
    fingerprint.etag = headers->etag;
    return fingerprint;
  }
  struct stat info;
  // A directory: a directory dataset (Zarr), whose files its members describe.
  if (stat(path.c_str(), &info) != 0 || !(S_ISREG(info.st_mode) || S_ISDIR(info.st_mode))) {
    return std::nullopt;
  }
  OutputFingerprint fingerprint;
  fingerprint.size = info.st_size;
  fingerprint.mtime_ns = mtime_ns_of(info);
  return fingerprint;
}

bool output_matches(const std::string& path, const OutputFingerprint& recorded,
                    std::string* store_etag) {
  if (is_object_store_path(path)) {
    const auto headers = object_headers(path, true);
    if (!headers || headers->etag.empty() || headers->size != recorded.size || !recorded.etag) {
      return false;
    }
    const EtagMatch match = match_object_etag(path, *headers, *recorded.etag);
    if (match == EtagMatch::k_same_content && store_etag != nullptr) {
      *store_etag = headers->etag;
    }
    return match != EtagMatch::k_different;
  }
  const auto now = fingerprint_of(path);
  if (!now || now->size != recorded.size || recorded.etag) {
    return false;
  }
  return now->mtime_ns == recorded.mtime_ns;
}

bool headers_match(const std::string& path, const ObjectHeaders& headers,
                   const OutputFingerprint& recorded) {
  return recorded.etag && headers.size == recorded.size &&
         match_object_etag(path, headers, *recorded.etag) != EtagMatch::k_different;
}

std::optional<std::vector<RecordedMember>> recorded_members(const OutputFingerprint& recorded) {
  const std::optional<JsonValue> parsed =
      recorded.members ? JsonValue::parse(*recorded.members) : std::nullopt;
  if (!parsed || !parsed->is_array()) {
    return std::nullopt;
  }
  std::vector<RecordedMember> members;
  for (const JsonValue& entry : parsed->items()) {
    const JsonValue* path = entry.find("path");
    const JsonValue* size = entry.find("size");
    if (path == nullptr || size == nullptr) {
      continue;
    }
    RecordedMember member;
    member.path = path->text();
    member.size = std::stoll(size->text());
    member.tree = entry.find("tree_sha256") != nullptr;
    if (const JsonValue* mtime = entry.find("mtime_ns")) {
      member.mtime_ns = std::stoll(mtime->text());
    }
    if (const JsonValue* etag = entry.find("etag")) {
      member.etag = etag->text();
    }
    members.push_back(std::move(member));
  }
  return members;
}

std::string local_members_json(const std::vector<PublishedFile>& files,
                               const std::string& primary) {
  JsonValue::Array members;
  for (const PublishedFile& file : files) {
    if (file.path != primary) {
      members.push_back(member_entry(file.path, file.size, file.mtime_ns, nullptr));
    }
  }
  if (is_local_directory(primary)) {
    members.push_back(tree_member(primary));
  }
  return members_text(std::move(members));
}

GDALDatasetUniquePtr open_output_for_check(const std::string& primary, std::string* refusal) {
  const unsigned int flags = GDAL_OF_RASTER | GDAL_OF_READONLY;
  std::optional<DirectoryHandle> directory;
  if (!is_vsi_path(primary)) {
    try {
      directory = DirectoryHandle::open(dirname_of(primary));
    } catch (const UnsafePath& unsafe) {
      if (refusal != nullptr) {
        *refusal = unsafe.what();
      }
      return nullptr;
    }
  }
  const std::string name = basename_of(primary);
  const std::optional<struct stat> there = directory ? directory->look(name) : std::nullopt;
  if (!directory || !there || S_ISDIR(there->st_mode)) {
    // An object, a directory dataset, or nothing there: opened as it is (GDAL says why not).
    return GDALDatasetUniquePtr(GDALDataset::Open(primary.c_str(), flags));
  }
  if (!S_ISREG(there->st_mode)) {
    if (refusal != nullptr) {
      *refusal = primary + " is not a regular file: the output is taken as changed";
    }
    return nullptr;
  }
  // Every name GDAL could take for a sidecar of `name` starts with its stem and a dot (a.tif:
  // a.tif.aux.xml, a.tif.ovr, a.aux.xml, a.tfw) or an underscore (a_rpc.txt).
  std::string stem = name;
  const size_t dot = stem.rfind('.');
  if (dot != std::string::npos && dot > 0) {
    stem.resize(dot);
  }
  CPLStringList siblings;
  for (const std::string& entry : directory->entries().value_or(std::vector<std::string>())) {
    const bool candidate = entry.size() > stem.size() && entry.compare(0, stem.size(), stem) == 0 &&
                           (entry[stem.size()] == '.' || entry[stem.size()] == '_');
    if (candidate) {
      const std::optional<struct stat> info = directory->look(entry);
      if (info && !S_ISREG(info->st_mode)) {
        if (refusal != nullptr) {
          *refusal = directory->name_path(entry) + " is " +
                     (S_ISFIFO(info->st_mode) ? "a FIFO" : "not a regular file") +
                     ", where GDAL would look for a file of the dataset " + primary +
                     ": the output is taken as changed, and nothing there is opened";
        }
        return nullptr;
      }
    }
    siblings.AddString(entry.c_str());
  }
  return GDALDatasetUniquePtr(
      GDALDataset::Open(primary.c_str(), flags, nullptr, nullptr, siblings.List()));
}

bool completed_output_is_current(const LedgerRow& row, const std::string& destination,
                                 std::string* store_etag, GDALDatasetUniquePtr* opened) {
  if (row.state != RowState::k_completed || row.superseded_at || !row.fingerprint ||
      row.output_uri != destination || !output_matches(destination, *row.fingerprint, store_etag)) {
    return false;
  }
  // The output as GDAL opens it, by its real path: every file it consists of now must be the
  // files recorded at completion, unchanged (nothing missing, edited, or added since).
  GDALDatasetUniquePtr dataset;
  {
    CPLErrorStateBackuper keep_error_state;
    CPLErrorHandlerPusher quiet(CPLQuietErrorHandler);
    std::string refusal;
    dataset = open_output_for_check(destination, &refusal);
    if (!refusal.empty()) {
      CPLDebug("IDEM", "%s", refusal.c_str());
    }
  }
  if (!dataset) {
    return false;
  }
  if (!output_members_unchanged(*dataset, destination, *row.fingerprint)) {
    return false;
  }
  if (opened != nullptr) {
    *opened = std::move(dataset);
  }
  return true;
}

bool output_members_unchanged(GDALDataset& output, const std::string& primary,
                              const OutputFingerprint& recorded) {
  if (!recorded.members) {
    return true;  // completed before members were recorded: the primary file decides
  }
  // The files the dataset lists now and every file the completion recorded (a driver may list
  // fewer than it writes: MRF names only its .mrf, not the index and data files beside it) are
  // all looked at: each must be one recorded, unchanged.
  CPLStringList files(output.GetFileList());
  for (const RecordedMember& member :
       recorded_members(recorded).value_or(std::vector<RecordedMember>())) {
    if (!member.tree && files.FindString(member.path.c_str()) < 0) {
      files.AddString(member.path.c_str());
    }
  }
  const std::optional<std::string> now = output_members_json(primary, files.List());
  if (!now || *now != *recorded.members) {
    CPLDebug("IDEM", "the files of %s differ from those recorded at completion: %s != %s",
             primary.c_str(), now ? now->c_str() : "(unreadable)", recorded.members->c_str());
    return false;
  }
  return true;
}

std::optional<std::string> output_members_json(const std::string& primary, CSLConstList files) {
  JsonValue::Array members;
  std::set<std::string> seen{primary};
  // The files under a directory dataset are its tree member's (GDAL 3.13's Zarr lists some).
  const bool directory = is_local_directory(primary);
  const std::string under = primary + "/";
  for (CSLConstList file = files; file != nullptr && *file != nullptr; ++file) {
    const std::string path = absolute_path(*file);
    if (!seen.insert(path).second || (directory && path.compare(0, under.size(), under) == 0)) {
      continue;
    }
    if (is_object_store_path(path)) {
      const auto headers = object_headers(path, true);
      if (!headers) {
        return std::nullopt;
      }
      members.push_back(member_entry(path, headers->size, 0, &headers->etag));
    } else {
      struct stat info {};
      if (::stat(path.c_str(), &info) != 0) {
        return std::nullopt;
      }
      members.push_back(member_entry(path, info.st_size, mtime_ns_of(info), nullptr));
    }
  }
  if (directory) {
    members.push_back(tree_member(primary));
  }
  return members_text(std::move(members));
}

std::vector<KnownFile> recorded_local_files(WorkerLedger& ledger, const std::string& destination,
                                            bool primaries) {
  std::vector<KnownFile> files;
  if (is_object_store_path(destination)) {
    return files;
  }
  for (const LedgerRow& row : ledger.rows_on_output(destination, RowState::k_completed)) {
    if (!row.fingerprint) {
      continue;
    }
    if (primaries && row.fingerprint->mtime_ns != 0) {
      files.push_back(KnownFile{destination, row.fingerprint->size, row.fingerprint->mtime_ns,
                                std::nullopt, std::nullopt});
    }
    for (const RecordedMember& member :
         recorded_members(*row.fingerprint).value_or(std::vector<RecordedMember>())) {
      if (!member.tree && member.mtime_ns) {
        files.push_back(
            KnownFile{member.path, member.size, member.mtime_ns, std::nullopt, std::nullopt});
      }
    }
  }
  return files;
}

DeleteOutcome delete_recorded_object(const std::string& path, const OutputFingerprint& expected,
                                     const std::vector<OutputFingerprint>& also_recorded,
                                     bool only_if_conditional, std::string* why) {
  const auto failed = [&](const std::string& reason) {
    if (why != nullptr) {
      *why = reason;
    }
    return DeleteOutcome::k_failed;
  };
  const ObjectLook look = look_at_object(path, true);
  if (look.found == ObjectLook::Found::k_missing) {
    return DeleteOutcome::k_absent;
  }
  if (look.found == ObjectLook::Found::k_unknown) {
    return failed("the store could not be asked what is there (" + look.why + ")");
  }
  const std::optional<ObjectHeaders> headers = look.headers;
  if (!headers_match(path, *headers, expected)) {
    return DeleteOutcome::k_not_ours;
  }
  for (const OutputFingerprint& recorded : also_recorded) {
    if (headers_match(path, *headers, recorded)) {
      return DeleteOutcome::k_not_ours;  // a completion records those bytes: they stay
    }
  }
  const std::string version = version_token(path, *headers);
  if (version.empty() || !conditional_delete_applies(path)) {
    if (only_if_conditional) {
      return DeleteOutcome::k_not_ours;  // cannot be sure it still is: left where it is
    }
    return VSIUnlink(path.c_str()) == 0 ? DeleteOutcome::k_deleted
                                        : failed("the store refused the delete");
  }
  test_pause("before_object_delete");  // looked, not yet deleted
  if (delete_object_if_version(path, version)) {
    return DeleteOutcome::k_deleted;
  }
  const ObjectLook now = look_at_object(path, true);
  switch (now.found) {
    case ObjectLook::Found::k_missing:
      return DeleteOutcome::k_absent;
    case ObjectLook::Found::k_unknown:
      return failed("the delete failed, and the store could not be asked again (" + now.why + ")");
    case ObjectLook::Found::k_object:
      break;
  }
  return version_token(path, now.headers) != version ? DeleteOutcome::k_not_ours
                                                     : failed("the store refused the delete");
}

}  // namespace idem
