// POSIX file primitives the durable journal is built from (durable_log.h):
// an owning fd, reading a whole file, writing all of a buffer, fsync of a
// file and of a directory, and "write a temporary file, fsync, rename over the
// target, fsync the directory". Every function returns a Status naming the
// path and the errno; none of them throws.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "common/unique_fd.h"

namespace tandem::store {

using UniqueFd = tandem::UniqueFd;  // common/unique_fd.h

// The whole file, or nullopt when it does not exist.
StatusOr<std::optional<std::string>> ReadFileIfExists(const std::filesystem::path& path);

// write(2) until all of `data` is written (retrying EINTR and short writes).
Status WriteAll(int fd, std::string_view data, const std::filesystem::path& path);

// fdatasync(2), retrying EINTR. Enough for appends: it flushes the size too.
Status SyncData(int fd, const std::filesystem::path& path);

// fsync of a directory, so that renames and new names in it are durable.
Status SyncDir(const std::filesystem::path& dir);

// unlink(2), ignoring a missing file.
Status RemoveIfExists(const std::filesystem::path& path);

// Writes `data` to `tmp` (created or truncated, mode 0600) and fsyncs it.
// Returns the open fd (write-only, O_APPEND) so the caller may keep appending.
StatusOr<UniqueFd> WriteSyncedFile(const std::filesystem::path& tmp, std::string_view data);

// rename(2) `from` over `to`, then fsync the directory of `to`.
Status RenameDurably(const std::filesystem::path& from, const std::filesystem::path& to);

}  // namespace tandem::store
