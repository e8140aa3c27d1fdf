// SPDX-License-Identifier: MIT
// SHA-256 through OpenSSL: an incremental hasher and one-shot helpers.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace idem {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(const void* data, std::size_t size);
  void update(std::string_view text) { update(text.data(), text.size()); }
  // The 32 bytes of the digest. The hasher cannot be used afterwards.
  void finish(unsigned char (&digest)[32]);
  // Lowercase hex of the digest. The hasher cannot be used afterwards.
  std::string finish_hex();

 private:
  struct Context;
  std::unique_ptr<Context> m_context;
  bool m_finished = false;
};

std::string sha256_hex(std::string_view data);

// Lowercase hex of `size` bytes.
std::string hex_of(const unsigned char* data, std::size_t size);

}  // namespace idem
