// POSIX file primitives for the durable journal; see durable_file.h.
#include "orchestrator/store/durable_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace tandem::store {

StatusOr<std::optional<std::string>> ReadFileIfExists(const std::filesystem::path& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT) return std::optional<std::string>();
    return ErrnoStatus("open " + path.string());
  }
  std::string data;
  char buf[64 * 1024];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("read " + path.string());
    }
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
  }
  return std::optional<std::string>(std::move(data));
}

Status WriteAll(int fd, std::string_view data, const std::filesystem::path& path) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("write " + path.string());
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

Status SyncData(int fd, const std::filesystem::path& path) {
  while (::fdatasync(fd) != 0) {
    if (errno != EINTR) return ErrnoStatus("fsync " + path.string());
  }
  return Status::Ok();
}

Status SyncDir(const std::filesystem::path& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return ErrnoStatus("open directory " + dir.string());
  while (::fsync(fd.get()) != 0) {
    if (errno != EINTR) return ErrnoStatus("fsync directory " + dir.string());
  }
  return Status::Ok();
}

Status RemoveIfExists(const std::filesystem::path& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoStatus("unlink " + path.string());
  return Status::Ok();
}

StatusOr<UniqueFd> WriteSyncedFile(const std::filesystem::path& tmp, std::string_view data) {
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600));
  if (!fd) return ErrnoStatus("create " + tmp.string());
  TANDEM_RETURN_IF_ERROR(WriteAll(fd.get(), data, tmp));
  while (::fsync(fd.get()) != 0) {  // a new file: metadata too, not only the data
    if (errno != EINTR) return ErrnoStatus("fsync " + tmp.string());
  }
  return fd;
}

Status RenameDurably(const std::filesystem::path& from, const std::filesystem::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return ErrnoStatus("rename " + from.string() + " to " + to.string());
  }
  return SyncDir(to.parent_path().empty() ? std::filesystem::path(".") : to.parent_path());
}

}  // namespace tandem::store
