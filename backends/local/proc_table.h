// What the local backend reads from /proc (docs/architecture.md, local
// backend): a process's identity (pid + start time + boot id, so a recycled
// pid is never mistaken for a task) and the processes that carry a task's
// marker in their environment (how escaped descendants are found).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tandem::backends::local {

struct ProcStat {
  pid_t pid = 0;
  char state = '?';          // R, S, D, Z, T, X, ...
  pid_t ppid = 0;
  pid_t pgid = 0;
  pid_t sid = 0;
  uint64_t start_time = 0;   // field 22: clock ticks after boot
  std::string comm;
  bool dead() const { return state == 'Z' || state == 'X' || state == 'x'; }
};

// Parses /proc/<pid>/stat; nullopt when the process does not exist.
std::optional<ProcStat> ReadProcStat(pid_t pid);

// Reads a whole small kernel file (/proc, /sys/fs/cgroup) into `out`; false
// when it cannot be opened.
bool ReadKernelFile(const std::filesystem::path& path, std::string& out);

// /proc/sys/kernel/random/boot_id, without the newline.
StatusOr<std::string> ReadBootId();

// Calls visit(pid, list) for every process but this one whose
// /proc/<pid>/<file> (a NUL-separated list: "environ", "cmdline") can be
// read; processes that cannot be read (another user, already gone) are
// skipped. One read per process.
void ForEachProcessList(const char* file, const std::function<void(pid_t, std::string_view)>& visit);

// Every live (non-zombie) process whose environment holds exactly the entry
// `env_entry` ("KEY=VALUE"). Processes whose environment cannot be read
// (another user, already gone) are skipped. Costs one read per process.
std::vector<ProcStat> FindProcessesWithEnv(const std::string& env_entry);

// The same for a command-line argument: every live process one of whose
// arguments is exactly `arg`.
std::vector<ProcStat> FindProcessesWithArg(const std::string& arg);

}  // namespace tandem::backends::local
