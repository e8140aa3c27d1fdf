// SPDX-License-Identifier: MIT
// Random tokens (random_token.hpp).
#include "base/random_token.hpp"

#include <sys/random.h>

#include <cerrno>
#include <chrono>
#include <random>
#include <vector>

namespace idem {

std::string random_hex(size_t hex_digits) {
  std::vector<unsigned char> bytes((hex_digits + 1) / 2);
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t read = ::getrandom(bytes.data() + got, bytes.size() - got, 0);
    if (read < 0) {
      if (errno == EINTR) {
        continue;
      }
      // No getrandom (a seccomp filter): the C++ library's source, mixed with the clock.
      std::random_device device;
      std::mt19937_64 generator(
          (uint64_t(device()) << 32) ^ device() ^
          uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()));
      for (; got < bytes.size(); ++got) {
        bytes[got] = static_cast<unsigned char>(generator());
      }
      break;
    }
    got += static_cast<size_t>(read);
  }
  static const char k_digits[] = "0123456789abcdef";
  std::string text;
  text.reserve(hex_digits);
  for (size_t i = 0; i < hex_digits; ++i) {
    const unsigned char byte = bytes[i / 2];
    text += k_digits[i % 2 == 0 ? byte >> 4 : byte & 0x0f];
  }
  return text;
}

}  // namespace idem
