// The lock of a run dir; see run_dir_lock.h.
#include "orchestrator/daemon/run_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cctype>
#include <string>

namespace tandem::daemon {

StatusOr<RunDirLock> RunDirLock::Acquire(const std::filesystem::path& run_dir) {
  const std::filesystem::path path = run_dir / "run.lock";
  // O_NOFOLLOW: a task may have replaced the file by a symlink to elsewhere.
  store::UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return ErrnoStatus("run_dir: open " + path.string());
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) return ErrnoStatus("run_dir: lock " + path.string());
    char buf[32] = {};
    const ssize_t n = ::pread(fd.get(), buf, sizeof buf - 1, 0);
    std::string pid;
    for (ssize_t i = 0; i < n && std::isdigit(static_cast<unsigned char>(buf[i])); ++i) pid += buf[i];
    return FailedPrecondition("run_dir: " + run_dir.string() + " is in use by another tandem process (pid " +
                              (pid.empty() ? "unknown" : pid) + ", which holds " + path.string() +
                              "); give this job another run_dir, or wait until that job ends");
  }
  const std::string text = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd.get(), 0) != 0 || ::pwrite(fd.get(), text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
    return ErrnoStatus("run_dir: write " + path.string());
  return RunDirLock(std::move(fd));
}

}  // namespace tandem::daemon
