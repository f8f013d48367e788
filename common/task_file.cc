// Files a task can write; see task_file.h.
#include "common/task_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "common/bounded_json.h"

namespace tandem {

namespace {

const char* KindOf(mode_t m) {
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISDIR(m)) return "a directory";
  return "not a plain file";
}

}  // namespace

StatusOr<UniqueFd> OpenTaskFile(const std::filesystem::path& path, int flags, mode_t mode) {
  UniqueFd fd(::open(path.c_str(), flags | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC, mode));
  if (!fd) {
    const int err = errno;
    if (err == ENOENT) return NotFound(path.string() + ": no such file");
    // O_NOFOLLOW on a symlink; O_WRONLY|O_NONBLOCK on a FIFO without a reader.
    if (err == ELOOP) return FailedPrecondition(path.string() + " is a symlink, not a regular file");
    if (err == ENXIO) return FailedPrecondition(path.string() + " is a FIFO, not a regular file");
    return ErrnoStatus("open " + path.string(), err);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus("stat " + path.string());
  if (!S_ISREG(st.st_mode)) return FailedPrecondition(path.string() + " is " + KindOf(st.st_mode) + ", not a regular file");
  const int fl = ::fcntl(fd.get(), F_GETFL);
  if (fl < 0 || ::fcntl(fd.get(), F_SETFL, fl & ~O_NONBLOCK) != 0) return ErrnoStatus("fcntl " + path.string());
  return fd;
}

StatusOr<std::ifstream> OpenTaskStream(const std::filesystem::path& path) {
  TANDEM_ASSIGN_OR_RETURN(UniqueFd fd, OpenTaskFile(path), "");
  std::ifstream in("/proc/self/fd/" + std::to_string(fd.get()), std::ios::binary);
  if (!in) return ErrnoStatus("open " + path.string());
  return in;
}

StatusOr<std::string> ReadAt(int fd, uint64_t offset, size_t max_bytes, const std::filesystem::path& path) {
  std::string data(max_bytes, '\0');
  size_t got = 0;
  while (got < max_bytes) {
    const ssize_t n = ::pread(fd, data.data() + got, max_bytes - got, static_cast<off_t>(offset + got));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("read " + path.string());
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  data.resize(got);
  return data;
}

StatusOr<std::string> ReadTaskFile(const std::filesystem::path& path, size_t max_bytes) {
  TANDEM_ASSIGN_OR_RETURN(UniqueFd fd, OpenTaskFile(path), "");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus("stat " + path.string());
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  // Up to one byte more than it held, within the limit plus one: a file that
  // grew past the limit since is told from one at it (its size is not trusted).
  const size_t want = static_cast<size_t>(std::min<uint64_t>(size, max_bytes) + 1);
  TANDEM_ASSIGN_OR_RETURN(std::string data, ReadAt(fd.get(), 0, want, path), "");
  if (data.size() > max_bytes)
    return ResourceExhausted(path.string() + " is larger than " + std::to_string(max_bytes) + " bytes");
  return data;
}

StatusOr<std::string> ReadTaskFileTail(const std::filesystem::path& path, size_t max_bytes, bool* truncated) {
  TANDEM_ASSIGN_OR_RETURN(UniqueFd fd, OpenTaskFile(path), "");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus("stat " + path.string());
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const uint64_t from = size > max_bytes ? size - max_bytes : 0;
  if (truncated) *truncated = from > 0;
  return ReadAt(fd.get(), from, max_bytes, path);
}

std::optional<nlohmann::json> ReadTaskJson(const std::filesystem::path& path, size_t max_bytes) {
  if (path.empty()) return std::nullopt;
  auto text = ReadTaskFile(path, max_bytes);
  if (!text.ok()) return std::nullopt;
  auto j = ParseJsonBounded(*text);
  if (!j.ok() || !j->is_object()) return std::nullopt;
  return std::move(j).value();
}

}  // namespace tandem
