// A task id's slot: marker mode's counterpart of a task's cgroup path
// (local_executor.h "Containment", docs/processes.md). The local executor
// gives every task process TANDEM_TASK_SLOT=<scope>/<task id>, the same for
// every launch of a task id, where <scope> is the executor's cgroup subtree
// name (LocalExecutorOptions::cgroup_name; a daemon's is derived from its
// state dir), else "tandem-<pid>". A restarted executor of the same scope
// finds a task id's earlier runs by it, with TANDEM_TASK_MARK telling runs
// apart; without cgroups, that is how a copy that a daemon killed between a
// start and its journal record left, or what an ended run left behind, is
// killed before the task runs again. A process that rewrote its environment
// escapes (marker mode's limit).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "backends/local/proc_table.h"
#include "common/status.h"

namespace tandem::backends::local {

inline constexpr std::string_view kSlotKey = "TANDEM_TASK_SLOT";

// The scope of an executor: `cgroup_name`, else "tandem-<this pid>".
std::string SlotScope(const std::string& cgroup_name);
// "TANDEM_TASK_SLOT=<scope>/<task id>".
std::string SlotEntry(const std::string& scope, const std::string& task_id);

// A live process carrying a slot of `scope`.
struct SlotProcess {
  ProcStat stat;
  std::string task_id;  // the slot's task id
  std::string marker;   // its TANDEM_TASK_MARK ("" when absent)
};
// Every live process (not this one) carrying a slot of `scope`: one scan of
// /proc, one read of each process's environ.
std::vector<SlotProcess> FindSlotProcesses(const std::string& scope);

// SIGKILLs every process of `scope` for which `victim` holds (its process
// group, then itself), scanning again until none is left; the number found
// by the first scan, or kDeadlineExceeded naming the survivors after
// `timeout`.
StatusOr<size_t> KillSlotProcesses(const std::string& scope, const std::function<bool(const SlotProcess&)>& victim,
                                   std::chrono::milliseconds timeout);

}  // namespace tandem::backends::local
