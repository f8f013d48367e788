// The exit record the exec shim (exec_shim.cc) writes when a task ends:
//   {"exit_code":N,"signal":S,"detail":"...","ended_at_ms":T}
// written atomically to LaunchRequest::exit_path. It is authoritative for how
// the task ended, also for a daemon that was down at the time.
#pragma once

#include <sys/wait.h>

#include <filesystem>
#include <optional>

#include "backends/executor.h"

namespace tandem::backends::local {

// The record at `path`; nullopt when there is none or it is malformed (logged).
std::optional<TaskExit> ReadExitRecord(const std::filesystem::path& path);

// A TaskExit from a waitid() result (CLD_EXITED, CLD_KILLED, CLD_DUMPED).
TaskExit ExitFromSiginfo(const siginfo_t& si);

}  // namespace tandem::backends::local
