// SPDX-License-Identifier: MIT
// The commit protocol (atomic_output.hpp): the temporary directory, and the publisher chosen
// once from the final path.
#include "work/atomic_output.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "base/error.hpp"
#include "base/paths.hpp"

namespace idem {

namespace {

// The directory a local output's temporary directory goes in, or the local temporary root of an
// object output's, opened by its handle.
DirectoryHandle open_parent(const std::string& path) {
  std::optional<DirectoryHandle> handle = DirectoryHandle::open(path);
  if (!handle) {
    const int error_number = errno;
    if (error_number == ENOENT) {
      throw Error(ErrorKind::k_io,
                  "destination directory " + path + " does not exist; create it first");
    }
    if (error_number == ENOTDIR) {
      throw Error(ErrorKind::k_io,
                  "destination directory " + path +
                      " is not a directory (a component of the path is a regular file); "
                      "choose another output path");
    }
    throw Error(ErrorKind::k_io, "cannot open the destination directory " + path + ": " +
                                     std::strerror(error_number));
  }
  return std::move(*handle);
}

}  // namespace

AtomicOutput::AtomicOutput(const std::string& final_path, const std::string& token,
                           std::optional<DirectoryHandle> directory)
    : m_directory(std::move(directory)) {
  if (final_path.empty() || final_path.back() == '/') {
    throw Error(ErrorKind::k_usage,
                "output path '" + final_path + "' does not name a file; give a file name");
  }
  const bool object = is_object_store_path(final_path);
  if (!object && is_vsi_path(final_path)) {
    throw Error(ErrorKind::k_usage,
                "output path " + final_path +
                    " is on a GDAL virtual filesystem that cannot be published atomically; "
                    "write to a local path or to object storage (/vsis3/, /vsigs/, /vsiaz/)");
  }
  // An object appears whole or not at all when its upload completes, so the temporary copy of
  // an object output is local (CPL_TMPDIR) and is uploaded to the final key directly.
  if (object || !m_directory) {
    m_directory = open_parent(object ? local_temp_root() : dirname_of(final_path));
  }
  m_temp = std::make_unique<TempDir>(*m_directory, token);
  const std::string primary = basename_of(final_path);
  m_temp_path = m_temp->reach(primary);
  if (object) {
    m_object = std::make_unique<ObjectPublisher>(final_path, *m_temp);
  } else {
    m_local = std::make_unique<LocalPublisher>(*m_directory, *m_temp, primary);
  }
}

AtomicOutput::~AtomicOutput() {
  if (!m_committed && m_local) {
    m_local->roll_back();  // published but never settled: what this attempt put in place goes
  }
  m_local.reset();
  m_object.reset();
  m_temp.reset();  // removes the temporary directory unless it was removed or kept
}

void AtomicOutput::sync_written() const {
  sync_at(m_temp->handle(), basename_of(m_temp_path));
}

void AtomicOutput::set_written_mode(mode_t mode) const {
  ::fchmodat(m_temp->handle().fd(), basename_of(m_temp_path).c_str(), mode, 0);
}

std::vector<std::string> AtomicOutput::commit(bool durable) {
  std::vector<std::string> published = publish(durable);
  settle();
  return published;
}

std::vector<std::string> AtomicOutput::publish(bool durable) {
  if (m_committed) {
    throw Error(ErrorKind::k_internal, "output was already committed");
  }
  if (m_object) {
    std::vector<std::string> published = m_object->upload();
    m_committed = true;
    return published;
  }
  return m_local->publish(durable);
}

void AtomicOutput::observe_objects() {
  if (m_object) {
    m_object->observe();
  }
}

void AtomicOutput::retire_with_publish(std::vector<KnownFile> files) {
  if (m_local) {
    m_local->retire_with_publish(std::move(files));
  }
}

void AtomicOutput::allow_replacing_directory(std::string recorded_tree) {
  if (m_local) {
    m_local->allow_replacing_directory(std::move(recorded_tree));
  }
}

void AtomicOutput::settle() {
  if (m_local) {
    m_committed = true;
    m_local->settle();
  }
}

void AtomicOutput::roll_back() noexcept {
  if (m_local) {
    m_local->roll_back();
  }
}

std::vector<PublishedFile> AtomicOutput::placed_files() const {
  return m_local ? m_local->placed_files() : std::vector<PublishedFile>();
}

bool AtomicOutput::still_in_place() const {
  return m_local ? m_local->still_in_place() : true;
}

bool AtomicOutput::replaced_an_output() const {
  return m_local ? m_local->replaced_an_output() : m_object->replaced_an_output();
}

const std::optional<CopiedBytes>& AtomicOutput::uploaded_primary() const {
  static const std::optional<CopiedBytes> none;
  return m_object ? m_object->uploaded_primary() : none;
}

}  // namespace idem
