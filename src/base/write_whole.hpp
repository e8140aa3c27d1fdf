// SPDX-License-Identifier: MIT
// The one owner of files written whole (a STAC export's JSON, an ENVI header rewritten): the
// text goes into a temporary file beside the name (".idem-tmp-<token>.<name>", in the same
// directory, reached by its handle), synced, renamed over the name, and the directory synced: a
// reader sees the old file or the new one, never part of one. Only a regular file, or nothing,
// is replaced: never a link, a special file or a directory. The new file's permission bits are
// those of a file replacing another (replacing_file_mode), never set-user-ID and the like.
#pragma once

#include <optional>
#include <string>

#include "base/directory_handle.hpp"

namespace idem {

enum class WriteOutcome { k_written, k_unchanged };

// Writes `text` as `name` in `directory`. With `only_if_changed`, a file that already holds
// exactly `text` is left as it is (k_unchanged). Throws idem::Error(k_io) naming the file and
// why (something other than a regular file there, no space...); the temporary file is removed.
WriteOutcome write_file_atomically(const DirectoryHandle& directory, const std::string& name,
                                   const std::string& text, bool only_if_changed = false);

// The text of the regular file `name` in `directory` (a link is not followed, a FIFO not
// waited on); nullopt when it is not one, or cannot be read.
std::optional<std::string> read_regular_file_at(const DirectoryHandle& directory,
                                                const std::string& name);

}  // namespace idem
