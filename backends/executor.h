// The executor interface: how the daemon launches and supervises tasks
// (docs/architecture.md; one front end per backend kind, as in Slurm).
//
// One interface, one implementation per folder: local/ (posix_spawn on this
// machine), slurm/ (job steps), redis/ (node agents). The daemon talks only to
// this interface; backends/tests/executor_suite.h is the shared test suite
// every implementation must pass.
//
// Threading: an executor is created with the daemon's io_context. Every
// method is called on that io_context's thread, and every callback
// (`ExitCallback`) is invoked on it too, never from another thread. Methods
// must not block for long: blocking work (waiting, reaping, libslurm, Redis)
// belongs on a worker thread that posts its result back.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tandem::backends {

// Everything needed to start one task. The environment is final: built by
// BuildTaskEnvironment (task_env.h) in the documented order, so every backend
// applies the same environment.
struct LaunchRequest {
  std::string job_id;
  std::string task_id;               // unique in the daemon, e.g. "demo-3f9c.actor.1"
  std::vector<std::string> argv;     // argv[0] is looked up in the task's PATH
  std::vector<std::string> env;      // "KEY=VALUE", complete (no inheritance)
  std::filesystem::path cwd;         // working directory
  std::filesystem::path stdout_path; // created/appended by the executor
  std::filesystem::path stderr_path;
  std::filesystem::path exit_path;   // where the exit record lands (see TaskExit)
};

// A durable reference to a running task: what the daemon journals so that it
// can find the task again after it restarts. Backend-specific fields travel
// in `data` (local: pid, pgid, start time; slurm: job and step id; redis:
// node and lease). Round-trips through JSON unchanged.
struct TaskRef {
  std::string backend;  // "local", "slurm", "redis"
  std::string task_id;
  nlohmann::json data = nlohmann::json::object();

  nlohmann::json ToJson() const;
  static StatusOr<TaskRef> FromJson(const nlohmann::json& j);
};

// How a task ended.
struct TaskExit {
  int exit_code = -1;          // 0..255 when the task exited normally
  int signal = 0;              // the terminating signal, 0 if none
  bool status_known = true;    // false when the task ended unsupervised and no record survived
  std::string detail;          // "exec failed: No such file or directory", "exited while daemon was down", ...
  std::chrono::system_clock::time_point ended_at{};
  // The backend took the task's allocation away under it (Slurm cancelled,
  // timed out, preempted or requeued the batch job it ran in): even a clean
  // exit (a command that catches SIGTERM and exits 0) did not finish its
  // work, so it does not count as success. The detail says what happened.
  bool interrupted = false;

  bool succeeded() const { return status_known && !interrupted && signal == 0 && exit_code == 0; }
  nlohmann::json ToJson() const;
};

// Whether an error of Executor::Start means "nothing was started, retry
// later" (the task waits for capacity) rather than a launch failure.
inline bool IsRetryableStart(const Status& st) {
  return st.code() == StatusCode::kResourceExhausted || st.code() == StatusCode::kUnavailable;
}

class Executor {
 public:
  // Called exactly once per started or re-attached task, on the io_context.
  using ExitCallback = std::function<void(const std::string& task_id, const TaskExit& exit)>;

  virtual ~Executor() = default;

  // The token used in specs, logs and TaskRef::backend ("local").
  virtual std::string_view kind() const = 0;

  // Launches the task. On success the task exists (it may already have
  // exited) and exactly one ExitCallback for it will follow. A command that
  // cannot be executed (not found, not executable) is not an error here: the
  // task exits with code 127 and a detail saying why. Errors are returned
  // only when nothing could be started, and their code says what the daemon
  // does next (IsRetryableStart below):
  //   - ResourceExhausted (no capacity now: no node has the GPUs free, no
  //     file descriptors, processes or disk space) and Unavailable (no node
  //     or backend service reachable now) mean "nothing was started, retry
  //     later": the daemon keeps the task pending, with the message as its
  //     detail, and calls Start again when capacity may have changed (a task
  //     ended, or the periodic retry). Return them only for conditions that
  //     can clear by themselves.
  //   - every other code is a launch failure: the task fails, and the job
  //     with it.
  virtual StatusOr<TaskRef> Start(const LaunchRequest& request) = 0;

  // Sends `sig` to the task and all its descendants. Ok if it already ended.
  virtual Status Signal(const TaskRef& ref, int sig) = 0;

  // Kills the task and every descendant, including ones that left its
  // process group or session (double-forked daemons). Returns once nothing
  // of the task remains that the backend can find, except where finding it
  // needs a slow remote call (Slurm: squeue/scancel): such a backend starts
  // the kill and returns, and the task's ExitCallback says when it is gone.
  // Ok if it already ended.
  virtual Status Kill(const TaskRef& ref) = 0;

  // After a daemon restart: takes supervision of a task started by an earlier
  // daemon. If the task still runs (and is the same task: pid reuse is
  // detected), the ExitCallback fires when it ends. If it ended meanwhile,
  // the ExitCallback is posted with what could be learned (its exit record,
  // or status_known=false). Errors only for a malformed ref.
  virtual Status Reattach(const TaskRef& ref) = 0;

  // Whether the task is running now, without waiting.
  virtual bool Alive(const TaskRef& ref) = 0;
};

}  // namespace tandem::backends
