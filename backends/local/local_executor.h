// The local backend (docs/architecture.md, backends/local; issue #2 part 5):
// runs tasks on this machine behind the Executor interface (executor.h).
//
// Launch. Start() posix_spawns the exec shim `tandem-exec` (exec_shim.cc) as
// the leader of a new session and process group (POSIX_SPAWN_SETSID), with
// the request's environment plus TANDEM_TASK_MARK=<random 128-bit hex>,
// stdin from /dev/null, stdout/stderr appended to the request's files, every
// other fd closed, and the cwd set with posix_spawn_file_actions_addchdir_np.
// The shim starts the command in its own process group, forwards
// SIGTERM/SIGINT/SIGHUP to it, and writes the exit record (exit_record.h).
// Every task process also carries TANDEM_TASK_SLOT=<scope>/<task id>, the
// same for every launch of a task id (task_slot.h). The daemon is never
// forked. A first launch does no /proc scan, fsync or sleep: one mkdir (the
// task's cgroup), one spawn, one pidfd_open, one read of /proc/<pid>/stat.
// (A record left at exit_path by an earlier run is told apart by its marker,
// not unlinked.)
//
// TaskRef.data: {pid, pgid, sid (all the shim's pid), start_time (field 22 of
// /proc/<pid>/stat), boot_id, marker, exit_path, cgroup (absent in marker
// mode)}.
//
// Supervision. Each task's pidfd (pidfd_open) sits in a
// boost::asio::posix::stream_descriptor; when it becomes readable the process
// ended (a wakeup while poll() finds it unreadable is not believed: asio can
// hand a closed descriptor's pending events to a new one): it is reaped with
// waitid(P_PIDFD) when it is our child, and its exit
// record, when present, is authoritative; otherwise the wait status is used;
// otherwise (re-attached, not our child, no record) status_known=false.
// Nothing blocks on the io thread except Kill(), whose contract is to return
// once the task is gone, Start() of a task whose old cgroup still holds
// processes, and KillUnclaimed() (each bounded by kill_timeout).
//
// Containment (docs/processes.md). Where a writable cgroup2 exists, each task
// runs in a cgroup of its own, <subtree>/<task id> (task_cgroup.h): the shim
// moves the command into it between fork and exec; the shim stays outside.
// That cgroup is emptied with cgroup.kill (or freeze + SIGKILL on kernels
// without it)
//   - when the task ends, before its ExitCallback: nothing it started
//     (`sleep 600 &`, a child that ignored SIGTERM, a double fork with a
//     cleared environment) outlives it, and the callback means "gone";
//   - when the shim dies (kill -9): the command goes with it;
//   - on Kill(), and on Start() of a task id whose cgroup still exists (a
//     relaunch after a daemon crash);
//   - after a restart: KillUnclaimed() (called once the daemon has
//     re-attached what its journal knows) kills and removes the cgroups no
//     supervised task claims, empty ones included.
// The cgroup path is recorded in TaskRef.data.cgroup, and is derivable from
// the task id, so a restarted daemon kills it too. Signal() signals every
// member of the cgroup.
//
// Fallback: the marker scan. Without a usable cgroup2 (none mounted, not
// writable, the shim cannot move a process in, or TANDEM_CGROUPS=off /
// LocalExecutorOptions::use_cgroups=false), Signal() sends the signal to the
// command's process group and to every process carrying the task's marker
// outside it (descendants that left the group or session); Kill() SIGKILLs
// the process groups of, and every process carrying, the marker, until none
// is left. Markers are found by scanning /proc/*/environ; a process that
// rewrote its environment or runs as another user escapes this, and
// descendants left behind by a task that ended by itself are killed only
// when the task is launched again: a relaunch (the request's
// TANDEM_CONTROL_LAUNCH above 1) first kills everything carrying the task's
// slot (task_slot.h), one /proc scan per round.
// In both modes SIGTERM/SIGINT/SIGHUP reach the command through the shim so
// that a signal sent right after Start() is not lost, and Kill() lets the
// shim write its record. containment() says which mode is in use (the
// daemon logs it and shows it in /healthz).

// Orphans. EnableChildSubreaper() makes this process the reaper of orphaned
// descendants (a double-forked task child is reparented here, not to init).
// With LocalExecutorOptions::reap_orphans, the executor reaps every exited
// child that is not one of its tasks on SIGCHLD. That takes over reaping for
// the whole process: enable it in at most one executor, in a process whose
// other components do not wait for children of their own. The tasks of the
// process's other executors are left to them (a process-wide set of
// supervised shims).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "backends/executor.h"
#include "backends/local/proc_table.h"
#include "backends/local/task_cgroup.h"

namespace tandem::backends {

struct LocalExecutorOptions {
  // The exec shim. Empty: "tandem-exec" next to this process's executable
  // (the directory of /proc/self/exe).
  std::filesystem::path exec_shim;
  // How long Kill() keeps killing before it reports survivors.
  std::chrono::milliseconds kill_timeout{2000};
  // Reap exited children that are not tasks (see the header comment).
  bool reap_orphans = false;
  // Contain tasks in cgroups when cgroup2 is usable (the environment
  // variable TANDEM_CGROUPS=off also turns this off); else the marker scan.
  bool use_cgroups = true;
  // The executor's cgroup subtree under its own cgroup; it must start with
  // "tandem". Empty: "tandem-<pid>". Executors sharing a subtree would
  // remove each other's fresh cgroups: give each its own.
  std::string cgroup_name;
};

// Which containment an executor uses (see "Containment" above).
struct Containment {
  std::string mode;         // "cgroup" or "marker"
  std::string cgroup;       // the subtree, in mode "cgroup"
  std::string kill_method;  // "cgroup.kill", "freeze+sigkill", "sigkill-each"
  std::string reason;       // why not "cgroup", in mode "marker"
  nlohmann::json ToJson() const;
};

// prctl(PR_SET_CHILD_SUBREAPER): orphaned descendants are reparented to this
// process. Pair with LocalExecutorOptions::reap_orphans.
Status EnableChildSubreaper();

class LocalExecutor final : public Executor {
 public:
  // Fails when the shim is missing or not executable, or the boot id cannot
  // be read. `on_exit` runs on `io`.
  static StatusOr<std::unique_ptr<LocalExecutor>> Create(boost::asio::io_context& io,
                                                         ExitCallback on_exit,
                                                         LocalExecutorOptions options = {});
  // Stops supervising; tasks keep running (a later executor can Reattach).
  ~LocalExecutor() override;

  std::string_view kind() const override { return "local"; }
  // The directories of stdout_path, stderr_path and exit_path, and cwd,
  // must exist: a missing one fails Start (nothing is started).
  StatusOr<TaskRef> Start(const LaunchRequest& request) override;
  Status Signal(const TaskRef& ref, int sig) override;
  Status Kill(const TaskRef& ref) override;
  Status Reattach(const TaskRef& ref) override;
  bool Alive(const TaskRef& ref) override;

  // After a restart, once every task the daemon knows is re-attached and
  // before it launches anything: kills and removes every task cgroup of this
  // executor's subtree that belongs to no supervised task (left by a daemon
  // that crashed between starting a task and journaling it, or between a
  // task's end and removing its cgroup). Returns how many held processes.
  // In marker mode: kills the processes of this executor's slots
  // (task_slot.h) that no supervised run claims by task id and marker;
  // returns how many task ids had such processes.
  size_t KillUnclaimed();

  const Containment& containment() const { return containment_; }
  // Tests force the cgroup kill fallbacks; no-op in marker mode.
  void ForceCgroupKillMethod(local::CgroupKillMethod m);

  // Tasks whose exit has not been reported yet (including ones whose
  // cgroup is being emptied before the report).
  size_t supervised_count() const { return tracked_.size() + drains_.size(); }
  const std::filesystem::path& exec_shim() const { return options_.exec_shim; }

 private:
  struct Tracked {
    std::string task_id;
    std::filesystem::path exit_path;
    std::string marker;
    std::filesystem::path cgroup;  // empty in marker mode
    uint64_t serial = 0;
    std::unique_ptr<boost::asio::posix::stream_descriptor> pidfd;
    std::unique_ptr<boost::asio::steady_timer> rewatch;  // after a wakeup that was not an exit
  };

  LocalExecutor(boost::asio::io_context& io, ExitCallback on_exit, LocalExecutorOptions options,
                std::string boot_id);
  void SetUpContainment();
  void Supervise(pid_t pid, int pidfd, const std::string& task_id,
                 const std::filesystem::path& exit_path, const std::string& marker,
                 const std::filesystem::path& cgroup);
  void Watch(pid_t pid);  // waits for the tracked shim's pidfd to become readable
  void OnEnded(pid_t pid, uint64_t serial);
  void WatchAgainSoon(pid_t pid, uint64_t serial);  // Watch after a short pause
  // Empties and removes the task's cgroup (without blocking the io thread),
  // then reports the exit.
  void DrainThenReport(std::filesystem::path cgroup, std::string task_id, TaskExit exit);
  // An exit waiting for its task's cgroup to empty.
  struct DrainState {
    std::filesystem::path cgroup;
    std::string task_id;
    TaskExit exit;
    size_t processes = 0;
    std::chrono::steady_clock::time_point deadline;
    std::chrono::milliseconds step{1};
    std::unique_ptr<boost::asio::steady_timer> timer;
  };
  void PollDrain(uint64_t id);
  // The task cgroup of a ref, when this executor uses cgroups and the ref's
  // path is one it may kill; empty otherwise.
  std::filesystem::path CgroupOf(const TaskRef& ref) const;
  std::vector<local::ProcStat> TaskProcesses(const std::filesystem::path& cgroup, const std::string& mark_entry);
  void WaitForChildren();
  void ReapOrphans();

  boost::asio::io_context& io_;
  ExitCallback on_exit_;
  LocalExecutorOptions options_;
  std::string boot_id_;
  uint64_t next_serial_ = 1;
  std::unordered_map<pid_t, Tracked> tracked_;  // by the shim's pid
  std::unique_ptr<boost::asio::signal_set> sigchld_;
  std::unique_ptr<boost::asio::steady_timer> reap_retry_;  // after another executor's zombie
  std::optional<local::TaskCgroups> cgroups_;
  Containment containment_;
  std::map<uint64_t, std::unique_ptr<DrainState>> drains_;  // exits waiting for their cgroup to empty
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);  // handlers hold a weak_ptr
};

}  // namespace tandem::backends
