// SPDX-License-Identifier: MIT
// A file copied whole into a new one, as a reflink where the file system can (the copy shares the
// blocks until one side changes), else byte by byte.
#pragma once

#include <string>

namespace idem {

// Copy the regular file `from` (a link at its name is not followed) into the new file `to`, with
// the permission bits of a file replacing it (replacing_file_mode: never set-user-ID and the
// like). Throws idem::Error(k_io) naming what failed.
void copy_file_contents(const std::string& from, const std::string& to);

}  // namespace idem
