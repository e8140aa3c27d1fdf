// SPDX-License-Identifier: MIT
// The one walk of this process's open descriptors (/proc/self/fd): which files the process holds
// open, whatever name or link they were opened by.
#pragma once

#include <functional>

namespace idem {

// Calls `visit` with each descriptor this process has open (but the walk's own), until it returns
// true. False when /proc/self/fd cannot be read (no procfs): nothing was visited.
bool for_each_open_descriptor(const std::function<bool(int fd)>& visit);

}  // namespace idem
