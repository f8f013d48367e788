// File-system operations of the checkpoint store (see checkpoint_fs.h).
#include "workers/checkpoint/checkpoint_fs.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace tandem::checkpoint {

Status FsError(std::string_view what, int err) {
  Status s = ErrnoStatus(what, err);
  const char* name = strerrorname_np(err);
  if (name == nullptr) return s;
  return Status(s.code(), s.message() + " (" + name + ")");
}

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

Status Fd::Close(std::string_view path) {
  if (fd_ < 0) return Status::Ok();
  const int fd = std::exchange(fd_, -1);
  // Linux releases the descriptor even when close fails; never retry.
  if (::close(fd) != 0 && errno != EINTR) return FsError("close " + std::string(path), errno);
  return Status::Ok();
}

Status WriteAll(int fd, std::span<const std::byte> bytes, std::string_view path) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return FsError("write " + std::string(path), errno);
    }
    if (n == 0) return FsError("write " + std::string(path), EIO);
    bytes = bytes.subspan(static_cast<size_t>(n));
  }
  return Status::Ok();
}

StatusOr<size_t> ReadFull(int fd, std::span<std::byte> bytes, std::string_view path) {
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      return FsError("read " + std::string(path), errno);
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  return got;
}

Status Fsync(int fd, std::string_view path) {
  while (::fsync(fd) != 0) {
    if (errno != EINTR) return FsError("fsync " + std::string(path), errno);
  }
  return Status::Ok();
}

Status FsyncDir(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return FsError("open directory " + path, errno);
  TANDEM_RETURN_IF_ERROR(Fsync(fd.get(), path));
  return fd.Close(path);
}

StatusOr<Fd> OpenBeneath(int dir_fd, std::string_view relpath, std::string_view shown) {
  int at = dir_fd;
  Fd current;  // the directory opened last (closed as we go down)
  size_t begin = 0;
  while (true) {
    const size_t slash = relpath.find('/', begin);
    const bool last = slash == std::string_view::npos;
    const std::string part(relpath.substr(begin, last ? std::string_view::npos : slash - begin));
    const int flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | (last ? 0 : O_DIRECTORY);
    Fd next(::openat(at, part.c_str(), flags));
    if (!next.valid()) {
      const int err = errno;
      // O_NOFOLLOW on a symlink gives ELOOP (ENOTDIR for a directory component).
      if (err == ELOOP || err == ENOTDIR)
        return InvalidArgument("open " + std::string(shown) + ": a component is a symlink or not a directory");
      return FsError("open " + std::string(shown), err);
    }
    if (last) return next;
    current = std::move(next);
    at = current.get();
    begin = slash + 1;
  }
}

Status MakeParents(const std::string& dir, std::string_view relpath) {
  size_t slash = relpath.find('/');
  while (slash != std::string_view::npos) {
    const std::string sub = dir + "/" + std::string(relpath.substr(0, slash));
    if (::mkdir(sub.c_str(), 0755) != 0 && errno != EEXIST) return FsError("mkdir " + sub, errno);
    struct stat st {};
    if (::lstat(sub.c_str(), &st) != 0) return FsError("stat " + sub, errno);
    if (!S_ISDIR(st.st_mode)) return InvalidArgument("mkdir " + sub + ": exists and is not a directory");
    slash = relpath.find('/', slash + 1);
  }
  return Status::Ok();
}

Status RemoveTree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);  // does not follow symlinks
  if (ec) return FsError("remove " + path, ec.value());
  return Status::Ok();
}

bool ProcessAlive(int64_t pid) {
  if (pid <= 0 || pid > INT32_MAX) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

}  // namespace tandem::checkpoint
