// SPDX-License-Identifier: MIT
// The one generator of random tokens: claim tokens, temporary names, upload nonces.
#pragma once

#include <cstddef>
#include <string>

namespace idem {

// `hex_digits` lowercase hexadecimal digits from the kernel's random source (getrandom), never
// the same twice in practice for 16 digits and more.
std::string random_hex(size_t hex_digits);

}  // namespace idem
