// SPDX-License-Identifier: MIT
// Sources read as they were keyed (source_watch.hpp).
#include "work/source_watch.hpp"

#include <unistd.h>

#include <cstdlib>
#include <set>

#include "base/error.hpp"
#include "base/open_descriptors.hpp"
#include "base/paths.hpp"
#include "key/source_digest.hpp"

namespace idem {

namespace {

// The names of the files this process holds open although they were deleted or replaced since
// it opened them: Linux shows such a descriptor's target as "<path> (deleted)".
std::set<std::string> held_replaced_files() {
  std::set<std::string> names;
  static const std::string k_deleted = " (deleted)";
  for_each_open_descriptor([&](int fd) {
    char target[4096];
    const std::string link = "/proc/self/fd/" + std::to_string(fd);
    const ssize_t length = ::readlink(link.c_str(), target, sizeof(target) - 1);
    if (length > static_cast<ssize_t>(k_deleted.size())) {
      const std::string name(target, static_cast<size_t>(length));
      if (name.compare(name.size() - k_deleted.size(), k_deleted.size(), k_deleted) == 0) {
        names.insert(name.substr(0, name.size() - k_deleted.size()));
      }
    }
    return false;
  });
  return names;
}

std::string real_name(const std::string& path) {
  char* resolved = ::realpath(path.c_str(), nullptr);
  if (resolved == nullptr) {
    return absolute_path(path);
  }
  std::string name = resolved;
  std::free(resolved);
  return name;
}

}  // namespace

SourceWatch::SourceWatch(const std::vector<SourceFile>& files) {
  for (const SourceFile& file : files) {
    if (file.read_as && !is_vsi_path(file.path)) {
      m_files.push_back(file);
    }
  }
  check();
}

void SourceWatch::check_held_files() const {
  if (m_files.empty()) {
    return;
  }
  const std::set<std::string> replaced = held_replaced_files();
  for (const SourceFile& file : m_files) {
    if (replaced.count(real_name(file.path)) != 0 || replaced.count(absolute_path(file.path))) {
      throw Error(ErrorKind::k_source,
                  "the source file '" + file.path +
                      "' was replaced after this process opened it, and a dataset opened before "
                      "still reads the old file while IDEM would key the new one: close that "
                      "dataset and open the file again, then run again");
    }
  }
}

void SourceWatch::check() const {
  for (const SourceFile& file : m_files) {
    bool same = false;
    try {
      same = local_file_identity(file.path) == *file.read_as;
    } catch (const Error&) {
      same = false;  // gone
    }
    if (!same) {
      throw Error(ErrorKind::k_source,
                  "the source file '" + file.path +
                      "' changed while the work read it (rewritten or replaced), so the output "
                      "may hold pixels of two versions: nothing is recorded for it; run again "
                      "once the source is written");
    }
  }
}

}  // namespace idem
