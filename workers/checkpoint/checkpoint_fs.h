// The file-system operations the checkpoint store is built from (docs/weights.md
// "Checkpoints"): file descriptors that close themselves, whole writes and
// reads that retry EINTR and short counts, fsync of files and directories,
// opening a path beneath a directory without following any symlink, and
// removing a tree. Every error is a Status naming the path and the errno,
// with its symbolic name: "write /r/.tmp-step-00000003-77/model.bin: No
// space left on device (ENOSPC)", so a log line says which file and why.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "common/status.h"

namespace tandem::checkpoint {

// ErrnoStatus(what, err) with " (ENAME)" appended.
Status FsError(std::string_view what, int err);

// An owned file descriptor, closed on destruction (errors there ignored:
// call Close() where they matter).
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd();
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Closes and reports close(2)'s error (EIO on some file systems), naming `path`.
  Status Close(std::string_view path);

 private:
  int fd_ = -1;
};

// Writes all of `bytes` to `fd` (retrying EINTR and short writes).
Status WriteAll(int fd, std::span<const std::byte> bytes, std::string_view path);
// Reads up to bytes.size() bytes; returns how many (fewer only at end of file).
StatusOr<size_t> ReadFull(int fd, std::span<std::byte> bytes, std::string_view path);
// fsync(2) of an open file or directory.
Status Fsync(int fd, std::string_view path);
// Opens the directory `path` and fsyncs it (makes its entries durable).
Status FsyncDir(const std::string& path);

// Opens `relpath` (already checked by ValidateRelativePath) beneath the
// directory `dir_fd` for reading, refusing a symlink at any component, so a
// hostile checkpoint cannot point its reader outside itself. `shown` names
// the file in errors.
StatusOr<Fd> OpenBeneath(int dir_fd, std::string_view relpath, std::string_view shown);

// Creates every directory of `relpath`'s parent beneath `dir` (mode 0755);
// ok when they exist.
Status MakeParents(const std::string& dir, std::string_view relpath);

// Removes `path` and everything under it, not following symlinks; ok when
// it does not exist.
Status RemoveTree(const std::string& path);

// True when a process with this id exists (kill(pid, 0) succeeds or says
// EPERM; a zombie not yet reaped counts as alive). Only meaningful on this
// host and in this pid namespace.
bool ProcessAlive(int64_t pid);

}  // namespace tandem::checkpoint
