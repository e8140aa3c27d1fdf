// SPDX-License-Identifier: MIT
// The publish of an object output (/vsis3/, /vsigs/, /vsiaz/...): every file of the attempt's
// local temporary directory uploaded to the final prefix, sidecars first and the primary last;
// each object appears whole when its upload completes. Each upload can be made conditional on the
// object looked at before the fenced check (observe), so that the store itself refuses it once
// another writer has changed the object since.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "store/object_store.hpp"
#include "work/temp_dir.hpp"

namespace idem {

class ObjectPublisher {
 public:
  // `final_path`: the primary object's path (/vsis3/bucket/key); `temp`: the local temporary
  // directory holding the files (it must outlive the publisher).
  ObjectPublisher(std::string final_path, TempDir& temp);

  // Looks at each object upload() will write (a request each) and makes its upload conditional
  // on what it saw (conditional_upload_applies): upload() then throws UploadRefused once another
  // writer has changed the object since; the objects uploaded before the refused one stay, and
  // the temporary files stay for another observe() and upload().
  void observe();
  // Uploads every file (a directory, which has no object that appears at once, is refused
  // before anything is sent), then removes the temporary directory. The final paths, primary
  // last.
  std::vector<std::string> upload();

  // After upload(): whether the primary replaced an object observe() saw there.
  bool replaced_an_output() const;
  // After upload(): what was uploaded as the primary object.
  const std::optional<CopiedBytes>& uploaded_primary() const { return m_uploaded_primary; }

 private:
  std::vector<std::string> ordered_names() const;
  std::string final_path_of(const std::string& name) const;

  std::string m_final_path;
  TempDir& m_temp;
  std::map<std::string, ExpectedObject> m_expected;  // by final object path (observe)
  std::optional<CopiedBytes> m_uploaded_primary;
};

}  // namespace idem
