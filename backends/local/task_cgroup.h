// One cgroup v2 per task (issue #12 point 2; docs/processes.md): how the
// local backend contains every process a task starts, as systemd, Slurm
// (proctrack/cgroup) and Kubernetes do.
//
// Layout. The executor owns a subtree <cgroup2 mount><its own cgroup>/<name>
// (name: LocalExecutorOptions::cgroup_name, e.g. "tandemd-<hash of the state
// dir>"), and each task gets <subtree>/<task cgroup name>, a name derived
// from the task id alone (TaskCgroupName) and also recorded in the TaskRef,
// so a restarted daemon finds it. The exec shim moves the task's command into
// it between fork and exec (exec_shim.cc, --cgroup); the shim itself stays
// outside so that it survives the kill and writes the exit record.
//
// Where cgroup2 is comes from /proc/self/mountinfo (fstype "cgroup2": at
// /sys/fs/cgroup on unified hosts, /sys/fs/cgroup/unified on hybrid ones),
// and the executor's own cgroup from the "0::" line of /proc/self/cgroup;
// nothing is hard-coded. Killing prefers cgroup.kill (Linux 5.14+); without
// it, freeze (cgroup.freeze, 5.2+), SIGKILL every member, thaw; without that,
// SIGKILL every member until none is left.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tandem::backends::local {

// The cgroup2 mount in /proc/self/mountinfo text: its mount point and the
// path of the hierarchy it shows ("/" unless inside a cgroup namespace).
struct Cgroup2Mount {
  std::filesystem::path mount_point;
  std::string root = "/";
};
std::optional<Cgroup2Mount> FindCgroup2Mount(std::string_view mountinfo);

// The unified-hierarchy path ("0::<path>") in /proc/<pid>/cgroup text.
std::optional<std::string> UnifiedCgroupPath(std::string_view proc_cgroup);

// The name of a task's cgroup: the task id when it is a safe file name
// ([A-Za-z0-9._-], not starting with '.', at most 200 bytes), else
// "t-<16 hex digits of its FNV-1a hash>". Stable across daemon versions.
std::string TaskCgroupName(std::string_view task_id);

enum class CgroupKillMethod {
  kKillFile,       // write 1 to cgroup.kill
  kFreezeAndKill,  // cgroup.freeze, SIGKILL each member, thaw
  kSignalEach,     // SIGKILL each member (a fork between the read and the kill is caught by the next round)
};
std::string_view ToString(CgroupKillMethod m);

// The executor's subtree of task cgroups.
class TaskCgroups {
 public:
  // Finds cgroup2 and creates (or re-uses) the subtree `name` under this
  // process's own cgroup. An error says why cgroups cannot be used here
  // (none mounted, not writable, ...): the caller falls back to the marker
  // scan. Whether a process may be moved in is checked by the caller (the
  // shim's --probe-cgroup), as only a real move proves it.
  static StatusOr<TaskCgroups> Open(const std::string& name);

  const std::filesystem::path& subtree() const { return subtree_; }
  CgroupKillMethod kill_method() const { return kill_method_; }
  void set_kill_method(CgroupKillMethod m) { kill_method_ = m; }  // tests force the fallbacks

  std::filesystem::path PathFor(std::string_view task_id) const { return subtree_ / TaskCgroupName(task_id); }

  // Whether `cg` (read back from a TaskRef) is a task cgroup this process may
  // kill: inside the cgroup2 mount, a direct child of a subtree whose name
  // starts with "tandem", no "." or ".." components. Never the root or any
  // cgroup above a subtree, whatever a ref says.
  bool IsTaskCgroup(const std::filesystem::path& cg) const;

  // The task cgroups in this subtree.
  std::vector<std::filesystem::path> List() const;

  // SIGKILLs every process in `cg` and its child cgroups. Ok when `cg` does
  // not exist. Returns at once: see Populated for when they are gone.
  Status KillAll(const std::filesystem::path& cg) const;

  // Members of `cg` and its child cgroups (cgroup.procs); empty if missing.
  static std::vector<pid_t> Procs(const std::filesystem::path& cg);
  // cgroup.events says "populated 1" (false when missing).
  static bool Populated(const std::filesystem::path& cg);
  // Removes `cg` and its child cgroups, deepest first. Ok when missing;
  // an error (EBUSY) while any process is still in it.
  static Status Remove(const std::filesystem::path& cg);
  // KillAll, then waits (sleeping, up to `timeout`) until it is empty, then
  // Remove. The error names what survived.
  Status KillAndRemove(const std::filesystem::path& cg, std::chrono::milliseconds timeout) const;

 private:
  TaskCgroups(std::filesystem::path mount, std::filesystem::path subtree, CgroupKillMethod m)
      : mount_(std::move(mount)), subtree_(std::move(subtree)), kill_method_(m) {}

  std::filesystem::path mount_;
  std::filesystem::path subtree_;
  CgroupKillMethod kill_method_;
};

}  // namespace tandem::backends::local
