// SPDX-License-Identifier: MIT
// SHA-256 through OpenSSL's SHA256_* functions: an incremental hasher and one-shot helpers.
//
// Not the EVP interface: OpenSSL 3's first EVP digest loads the configuration and the default
// provider, paid by every worker process for hashing a few kilobytes of key JSON (a
// measurable part of a 256x256 tile, bench/RESULTS.md). SHA256_* runs the same assembly (SHA-NI
// where the CPU has it) without that set-up. OpenSSL 3.0 marks them deprecated, not removed.
#define OPENSSL_SUPPRESS_DEPRECATED
#include "base/sha256.hpp"

#include <openssl/sha.h>

#include "base/error.hpp"

namespace idem {

struct Sha256::Context {
  SHA256_CTX sha;
};

Sha256::Sha256() : m_context(std::make_unique<Context>()) {
  if (SHA256_Init(&m_context->sha) != 1) {
    throw Error(ErrorKind::k_internal, "OpenSSL: cannot initialise SHA-256");
  }
}

Sha256::~Sha256() = default;

void Sha256::update(const void* data, std::size_t size) {
  if (m_finished) {
    throw Error(ErrorKind::k_internal, "SHA-256: data added after the digest was finished");
  }
  if (size != 0 && SHA256_Update(&m_context->sha, data, size) != 1) {
    throw Error(ErrorKind::k_internal, "OpenSSL: SHA-256 update failed");
  }
}

void Sha256::finish(unsigned char (&digest)[32]) {
  static_assert(sizeof(digest) == SHA256_DIGEST_LENGTH, "SHA-256 digests are 32 bytes");
  if (m_finished) {
    throw Error(ErrorKind::k_internal, "SHA-256: the digest was finished twice");
  }
  m_finished = true;
  if (SHA256_Final(digest, &m_context->sha) != 1) {
    throw Error(ErrorKind::k_internal, "OpenSSL: SHA-256 final failed");
  }
}

std::string Sha256::finish_hex() {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  finish(digest);
  return hex_of(digest, sizeof(digest));
}

std::string hex_of(const unsigned char* data, std::size_t size) {
  static const char k_hex_digits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * size);
  for (std::size_t i = 0; i < size; ++i) {
    hex += k_hex_digits[data[i] >> 4];
    hex += k_hex_digits[data[i] & 0x0f];
  }
  return hex;
}

std::string sha256_hex(std::string_view data) {
  Sha256 hasher;
  hasher.update(data);
  return hasher.finish_hex();
}

}  // namespace idem
