// Opening and reading files a task can write (its logs, its exit record, the
// records a backend keeps beside them, the run dir's logs) as the hostile
// input they are. Tasks run as the daemon's user and may have replaced any
// of them:
//   - by a FIFO: a plain open() waits for the other end, and the daemon's
//     one io thread with it;
//   - by a symlink: to /dev/zero (a read that never ends), or to a file the
//     task could not read itself but the daemon serves;
//   - by a file of any size, or with any content.
// OpenTaskFile opens without blocking and without following a symlink in
// the path's last component, and accepts only a regular file; the readers
// bound what they read.
#pragma once

#include <fcntl.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "common/unique_fd.h"

namespace tandem {

// `flags`: O_RDONLY, or O_WRONLY or O_RDWR with O_APPEND (and O_CREAT, then
// `mode`).
// NotFound when it does not exist; FailedPrecondition when it is not a
// regular file ("... is a FIFO, not a regular file") or is a symlink; other
// errors name the path and errno. The descriptor is blocking again once open.
StatusOr<UniqueFd> OpenTaskFile(const std::filesystem::path& path, int flags = O_RDONLY, mode_t mode = 0644);

// The same file as an input stream (for readers that go line by line with
// a bound of their own): opened as OpenTaskFile opens it, then through
// /proc/self/fd, so that the stream reads the file that was checked.
StatusOr<std::ifstream> OpenTaskStream(const std::filesystem::path& path);

// At most `max_bytes` from `offset` of an open file (fewer at its end).
StatusOr<std::string> ReadAt(int fd, uint64_t offset, size_t max_bytes, const std::filesystem::path& path);

// The whole file; ResourceExhausted when it holds more than `max_bytes`.
StatusOr<std::string> ReadTaskFile(const std::filesystem::path& path, size_t max_bytes);

// Its last `max_bytes` bytes (all of a smaller file); *truncated says
// whether anything came before them.
StatusOr<std::string> ReadTaskFileTail(const std::filesystem::path& path, size_t max_bytes,
                                       bool* truncated = nullptr);

// The JSON object in the file (at most `max_bytes`, nested at most
// kMaxJsonDepth deep: common/bounded_json.h); nullopt when it is missing,
// not a regular file, too large, not JSON or not an object. Read its fields
// with common/json_field.h: any of them may have any type.
std::optional<nlohmann::json> ReadTaskJson(const std::filesystem::path& path, size_t max_bytes = 1 << 20);

}  // namespace tandem
