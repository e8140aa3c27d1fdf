// SPDX-License-Identifier: MIT
// An attempt's temporary directory: where a driver writes before the publish. It is made inside
// a directory IDEM holds open (the output's, or CPL_TMPDIR's for an object output), mode 0700,
// held by its own handle and locked (flock) for its whole life, so that `gdal-idem reap` leaves
// it alone while its writer lives; it goes (through safe_delete) with the object unless kept.
#pragma once

#include <string>
#include <vector>

#include "base/directory_handle.hpp"
#include "base/paths.hpp"
#include "base/safe_delete.hpp"

namespace idem {

// Every temporary directory IDEM creates is named "<k_temp_prefix><token>" (base/paths.hpp);
// `gdal-idem reap` removes only such directories, only when older than the lease and not locked.

class TempDir {
 public:
  // Makes "<k_temp_prefix><token>" in `parent` (a duplicate of its handle is kept). Throws
  // idem::Error(k_io) saying why the directory cannot take it and what to do (missing,
  // read-only, no space...), or that another attempt uses the same token.
  TempDir(const DirectoryHandle& parent, const std::string& token);
  ~TempDir();  // removes it with everything in it, unless keep() was called
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const DirectoryHandle& handle() const { return m_handle; }
  const DirectoryHandle& parent() const { return m_parent; }
  const std::string& name() const { return m_name; }
  // Its path by name (the parent's path and its name): for messages and reap's listings.
  std::string path() const { return m_parent.name_path(m_name); }
  // A name that reaches `file` in it whatever becomes of the paths above it (DirectoryHandle::
  // reach): what GDAL is given to write.
  std::string reach(const std::string& file) const { return m_handle.reach(file); }
  // Its names; throws idem::Error(k_io) when it cannot be listed.
  std::vector<std::string> names() const;
  // Whether its name in the parent is still this directory (another worker that took the work
  // over removes an abandoned attempt's: false).
  bool still_there() const;
  // Removes it now (as the destructor would); the outcome of the removal.
  DeleteOutcome remove();
  // Leaves it where it is when this object goes (its files were moved or uploaded).
  void keep() { m_removed = true; }

 private:
  DirectoryHandle m_parent;
  std::string m_name;
  DirectoryHandle m_handle;
  bool m_removed = false;
};

// Whether the temporary directory `name` in `parent` is locked by a living writer (its TempDir
// holds the lock; a killed writer's lock went with it). A directory that cannot be opened is not.
bool temp_dir_is_locked(const DirectoryHandle& parent, const std::string& name);

// The token of a temporary directory that `owner` (the IDEM driver: the work key's first 16
// digits) marks as its own: "<attempt token>.<owner>"; the attempt token alone without one.
std::string temp_token(const std::string& attempt_token, const std::string& owner);
// The attempt token of a temporary directory's name ("" when not one of IDEM's).
std::string token_of_temp_dir(const std::string& name);

}  // namespace idem
