// The exit record the exec shim (exec_shim.cc) writes when a task ends:
//   {"exit_code":N,"signal":S,"detail":"...","ended_at_ms":T,"marker":M}
// written atomically to LaunchRequest::exit_path. It is authoritative for how
// the task ended, also for a daemon that was down at the time. M is the
// task's TANDEM_TASK_MARK: a record with another marker belongs to an earlier
// run that used the same path and is ignored.
#pragma once

#include <sys/wait.h>

#include <filesystem>
#include <optional>

#include "backends/executor.h"

namespace tandem::backends::local {

// The most an exit record may hold (the shim's are a few hundred bytes).
inline constexpr size_t kMaxExitRecordBytes = 64 * 1024;

// The record at `path` written by the task with `marker`; nullopt when there
// is none, it is another run's, or it is malformed or not a regular file
// (logged).
std::optional<TaskExit> ReadExitRecord(const std::filesystem::path& path, const std::string& marker);

// A TaskExit from a waitid() result (CLD_EXITED, CLD_KILLED, CLD_DUMPED).
TaskExit ExitFromSiginfo(const siginfo_t& si);

}  // namespace tandem::backends::local
