// The lock of a run dir (docs/jobspec.md "Run directories"): one job of one
// process at a time. `<run_dir>/run.lock` is flock'd (exclusive, not
// blocking) by the process whose job has the run dir, for the job's life,
// and holds that process's pid. A job of another daemon, or of another
// `tandem run`, naming the same run dir is refused with that pid; the
// daemon's own live jobs are refused earlier, by path (job_admission.cc).
// The lock goes with its fd: when the job ends, or when the holder dies
// (kill -9 included: the kernel drops it), so a crashed holder never keeps
// a run dir. The fd is O_CLOEXEC and tasks are spawned with every other fd
// closed, so a task that outlives its daemon does not hold it.
#pragma once

#include <filesystem>

#include "common/status.h"
#include "orchestrator/store/durable_file.h"

namespace tandem::daemon {

class RunDirLock {
 public:
  // Takes the lock of `run_dir` (which must exist) and writes this
  // process's pid into it; kFailedPrecondition naming the holder's pid when
  // another open file description holds it.
  static StatusOr<RunDirLock> Acquire(const std::filesystem::path& run_dir);

  RunDirLock() = default;
  RunDirLock(RunDirLock&&) noexcept = default;
  RunDirLock& operator=(RunDirLock&&) noexcept = default;
  bool held() const { return static_cast<bool>(fd_); }

 private:
  explicit RunDirLock(store::UniqueFd fd) : fd_(std::move(fd)) {}
  store::UniqueFd fd_;
};

}  // namespace tandem::daemon
