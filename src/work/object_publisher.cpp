// SPDX-License-Identifier: MIT
// The publish of an object output (object_publisher.hpp).
#include "work/object_publisher.hpp"

#include <sys/stat.h>

#include <utility>

#include "base/error.hpp"
#include "base/paths.hpp"
#include "work/lease.hpp"

namespace idem {

ObjectPublisher::ObjectPublisher(std::string final_path, TempDir& temp)
    : m_final_path(std::move(final_path)), m_temp(temp) {}

std::string ObjectPublisher::final_path_of(const std::string& name) const {
  return dirname_of(m_final_path) + "/" + name;
}

std::vector<std::string> ObjectPublisher::ordered_names() const {
  // Sidecars first, the primary last: a reader that sees the primary sees a complete dataset.
  const std::string primary = basename_of(m_final_path);
  std::vector<std::string> ordered;
  bool has_primary = false;
  for (const auto& name : m_temp.names()) {
    if (name == primary) {
      has_primary = true;
    } else {
      ordered.push_back(name);
    }
  }
  if (!has_primary) {
    throw Error(ErrorKind::k_io, "nothing to publish: " + m_temp.path() + "/" + primary +
                                     " was not written (the driver failed before creating it)");
  }
  ordered.push_back(primary);
  return ordered;
}

void ObjectPublisher::observe() {
  m_expected.clear();
  for (const auto& name : ordered_names()) {
    const std::optional<struct stat> info = m_temp.handle().look(name);
    const std::string to = final_path_of(name);
    if (!info || !conditional_upload_applies(to, static_cast<int64_t>(info->st_size))) {
      continue;
    }
    m_expected[to] = ExpectedObject{current_object_version(to)};
  }
}

std::vector<std::string> ObjectPublisher::upload() {
  const std::vector<std::string> ordered = ordered_names();
  // Each file becomes one object. A directory (a driver's dataset of many files) has no object
  // that appears at once: refused before anything is uploaded.
  for (const auto& name : ordered) {
    const std::optional<struct stat> info = m_temp.handle().look(name);
    if (!info || !S_ISREG(info->st_mode)) {
      throw Error(ErrorKind::k_usage,
                  "cannot upload " + m_temp.path() + "/" + name + " to " + final_path_of(name) +
                      ": the driver wrote a directory, not a file, and a directory of objects "
                      "cannot be published to object storage at once; write the dataset to a "
                      "local path, or choose a single-file format");
    }
  }
  std::vector<std::string> published;
  for (const auto& name : ordered) {
    if (name == ordered.back()) {
      test_pause("during_upload");  // sidecars are up, the primary is not
    }
    const std::string to = final_path_of(name);
    const auto expected = m_expected.find(to);
    const CopiedBytes sent = copy_vsi_file(
        m_temp.reach(name), to, expected != m_expected.end() ? &expected->second : nullptr);
    if (name == ordered.back()) {
      m_uploaded_primary = sent;
    }
    published.push_back(to);
  }
  m_temp.remove();
  return published;
}

bool ObjectPublisher::replaced_an_output() const {
  const auto seen = m_expected.find(m_final_path);
  return seen != m_expected.end() && !seen->second.version.empty();
}

}  // namespace idem
