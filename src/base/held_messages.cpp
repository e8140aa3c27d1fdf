// SPDX-License-Identifier: MIT
// GDAL's warnings and errors held back for a while (held_messages.hpp).
#include "base/held_messages.hpp"

namespace idem {

HeldMessages::HeldMessages() {
  CPLPushErrorHandlerEx(
      [](CPLErr type, CPLErrorNum number, const char* message) {
        static_cast<std::vector<Held>*>(CPLGetErrorHandlerUserData())
            ->push_back({type, number, message != nullptr ? message : ""});
      },
      &m_held);
  CPLSetCurrentErrorHandlerCatchDebug(FALSE);
  m_pushed = true;
}

HeldMessages::~HeldMessages() {
  pop();
}

void HeldMessages::pop() {
  if (m_pushed) {
    CPLPopErrorHandler();
    m_pushed = false;
  }
}

void HeldMessages::replay(const std::function<bool(CPLErr, const std::string&)>& drop) {
  pop();
  for (const Held& message : m_held) {
    if (!drop || !drop(message.type, message.message)) {
      CPLError(message.type, message.number, "%s", message.message.c_str());
    }
  }
  m_held.clear();
}

std::string last_gdal_error() {
  const char* message = CPLGetLastErrorMsg();
  return message != nullptr && message[0] != '\0' ? std::string(message)
                                                  : std::string("no GDAL error message");
}

GDALDatasetUniquePtr open_quietly(const std::string& path, unsigned int flags) {
  CPLErrorHandlerPusher quiet(CPLQuietErrorHandler);
  return GDALDatasetUniquePtr(GDALDataset::Open(path.c_str(), flags));
}

}  // namespace idem
