// SPDX-License-Identifier: MIT
// Invariant I3, first half, "a completion records only what was read" (docs/concepts.md): the
// files a work's key was derived from are the files its pixels are read from. The IDEM driver
// takes a SourceWatch once the key is made and checks it before it publishes and again just
// before it records the completion; a source changed in between fails the attempt (nothing
// published, or what was published taken back) instead of recording the old key over new pixels.
#pragma once

#include <string>
#include <vector>

#include "key/source_identity.hpp"

namespace idem {

class SourceWatch {
 public:
  SourceWatch() = default;
  // Throws Error(k_source) when a local source is not, now, the file its digest was of (it was
  // rewritten or replaced since it was read). Costs a stat per source.
  explicit SourceWatch(const std::vector<SourceFile>& files);
  // Throws Error(k_source) naming the first source that changed since the watch was taken.
  void check() const;
  // Throws Error(k_source) when this process holds an open file of an earlier version of a
  // source: a dataset opened before the file was replaced reads the old bytes, while the key
  // names the new ones. Looks at every descriptor of the process, so it is asked only of work
  // that is to be done (a skip records nothing and costs nothing per descriptor).
  void check_held_files() const;

 private:
  std::vector<SourceFile> m_files;  // local files with their identity
};

}  // namespace idem
