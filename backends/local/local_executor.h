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
// The daemon is never forked. Start() does no /proc scan, fsync or sleep: one
// spawn, one pidfd_open, one read of /proc/<pid>/stat. (A record left at
// exit_path by an earlier run is told apart by its marker, not unlinked.)
//
// TaskRef.data: {pid, pgid, sid (all the shim's pid), start_time (field 22 of
// /proc/<pid>/stat), boot_id, marker, exit_path}.
//
// Supervision. Each task's pidfd (pidfd_open) sits in a
// boost::asio::posix::stream_descriptor; when it becomes readable the process
// ended: it is reaped with waitid(P_PIDFD) when it is our child, and its exit
// record, when present, is authoritative; otherwise the wait status is used;
// otherwise (re-attached, not our child, no record) status_known=false.
// Nothing blocks on the io thread except Kill(), whose contract is to return
// once the task is gone (bounded by kill_timeout).
//
// Descendants. Signal() sends the signal to the command's process group and
// to every process carrying the task's marker outside it (descendants that
// left the group or session); SIGTERM/SIGINT/SIGHUP reach the command through
// the shim so that a signal sent right after Start() is not lost. Kill()
// SIGKILLs the process groups of, and every process carrying, the marker,
// until none is left, then lets the shim write its record. Markers are found
// by scanning /proc/*/environ; a process that rewrote its environment or runs
// as another user escapes this. The robust answer is a cgroup v2 per task
// (the shim joins <root>/<task> before starting the command; Kill writes
// cgroup.kill). That is future work: this machine does have a writable
// cgroup2 hierarchy (hybrid mode, /sys/fs/cgroup/unified, with cgroup.kill),
// but v2 is not mounted at /sys/fs/cgroup on every host, and putting only the
// command (not the shim, which must survive to write the record) in the
// cgroup needs fork+join+exec in the shim instead of posix_spawnp.
//
// Orphans. EnableChildSubreaper() makes this process the reaper of orphaned
// descendants (a double-forked task child is reparented here, not to init).
// With LocalExecutorOptions::reap_orphans, the executor reaps every exited
// child that is not one of its tasks on SIGCHLD. That takes over reaping for
// the whole process: enable it in at most one executor, in a process whose
// other components do not wait for children of their own.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <unordered_map>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/signal_set.hpp>

#include "backends/executor.h"

namespace tandem::backends {

struct LocalExecutorOptions {
  // The exec shim. Empty: "tandem-exec" next to this process's executable
  // (the directory of /proc/self/exe).
  std::filesystem::path exec_shim;
  // How long Kill() keeps killing before it reports survivors.
  std::chrono::milliseconds kill_timeout{2000};
  // Reap exited children that are not tasks (see the header comment).
  bool reap_orphans = false;
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

  // Tasks whose exit has not been reported yet.
  size_t supervised_count() const { return tracked_.size(); }
  const std::filesystem::path& exec_shim() const { return options_.exec_shim; }

 private:
  struct Tracked {
    std::string task_id;
    std::filesystem::path exit_path;
    std::string marker;
    uint64_t serial = 0;
    std::unique_ptr<boost::asio::posix::stream_descriptor> pidfd;
  };

  LocalExecutor(boost::asio::io_context& io, ExitCallback on_exit, LocalExecutorOptions options,
                std::string boot_id);
  void Supervise(pid_t pid, int pidfd, const std::string& task_id,
                 const std::filesystem::path& exit_path, const std::string& marker);
  void OnEnded(pid_t pid, uint64_t serial);
  void WaitForChildren();
  void ReapOrphans();

  boost::asio::io_context& io_;
  ExitCallback on_exit_;
  LocalExecutorOptions options_;
  std::string boot_id_;
  uint64_t next_serial_ = 1;
  std::unordered_map<pid_t, Tracked> tracked_;  // by the shim's pid
  std::unique_ptr<boost::asio::signal_set> sigchld_;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);  // handlers hold a weak_ptr
};

}  // namespace tandem::backends
