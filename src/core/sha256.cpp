// SHA-256 through OpenSSL's EVP interface: an incremental hasher and one-shot helpers.
#include "core/sha256.hpp"

#include <openssl/evp.h>

#include "core/error.hpp"

namespace idem {

struct Sha256::Context {
  struct Free {
    void operator()(EVP_MD_CTX* context) const { EVP_MD_CTX_free(context); }
  };
  std::unique_ptr<EVP_MD_CTX, Free> md;
};

Sha256::Sha256() : m_context(std::make_unique<Context>()) {
  m_context->md.reset(EVP_MD_CTX_new());
  if (!m_context->md || EVP_DigestInit_ex(m_context->md.get(), EVP_sha256(), nullptr) != 1) {
    throw Error(ErrorKind::k_internal, "OpenSSL: cannot initialise SHA-256");
  }
}

Sha256::~Sha256() = default;

void Sha256::update(const void* data, std::size_t size) {
  if (m_finished) {
    throw Error(ErrorKind::k_internal, "Sha256::update after finish_hex");
  }
  if (size != 0 && EVP_DigestUpdate(m_context->md.get(), data, size) != 1) {
    throw Error(ErrorKind::k_internal, "OpenSSL: SHA-256 update failed");
  }
}

std::string Sha256::finish_hex() {
  if (m_finished) {
    throw Error(ErrorKind::k_internal, "Sha256::finish_hex called twice");
  }
  m_finished = true;
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(m_context->md.get(), digest, &length) != 1) {
    throw Error(ErrorKind::k_internal, "OpenSSL: SHA-256 final failed");
  }
  static const char k_hex_digits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * length);
  for (unsigned int i = 0; i < length; ++i) {
    hex += k_hex_digits[digest[i] >> 4];
    hex += k_hex_digits[digest[i] & 0x0f];
  }
  return hex;
}

std::string sha256_hex(std::string_view data) {
  Sha256 hasher;
  hasher.update(data);
  return hasher.finish_hex();
}

}  // namespace idem
