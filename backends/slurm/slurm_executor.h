// The Slurm backend in allocation mode (issue #5 items 1, 3, 4;
// docs/slurm.md, backends/slurm): runs each task as one job step (`srun`) of
// an existing allocation, behind the Executor interface (executor.h).
//
// Launch. Start() runs, through a LocalExecutor of its own (so the srun client
// is a local child that tandem supervises, re-attachable by pid):
//
//   srun --jobid=J --job-name=<step name> -n1 -N1 --chdir=<cwd>
//        --output=<stdout> --error=<stderr> --open-mode=append --quiet
//        (owner: --gres=<gres>:N | colocated or CPU-only: --overlap --gres=none)
//        [-w <TANDEM_NODE>] <srun_args...>
//        -- env CUDA_VISIBLE_DEVICES=<ids> tandem-exec --exit-path <exit> -- ARGV
//
// with the request's environment (plus SLURM_CONF when the daemon has one) as
// the srun process's whole environment; srun's default --export=ALL hands
// exactly that to the step, so every step, colocated ones included, sees the
// documented environment order of task_env.h. Slurm's GRES plugin rewrites
// CUDA_VISIBLE_DEVICES for a GRES step; the `env` in front of the shim puts
// back the ids tandem placed, so colocated steps see identical devices and
// replicas disjoint slices whatever Slurm picked.
//
// GRES ownership. The first live step on a set of GPUs owns it and requests
// `--gres=<gres>:N`; a step whose GPUs overlap a live owner's is colocated and
// never requests GRES again (that is the deadlock of issue #5): it runs with
// --overlap --gres=none. CPU-only steps are always --overlap --gres=none.
//
// Exit. The exec shim inside the step writes the exit record at exit_path
// (a filesystem shared with the step's node); it is authoritative. Without it
// (the step was SIGKILLed, or its node died) the exit comes from srun's exit
// status (128+N read as signal N). srun's own messages go to
// <exit_path>.srun.log, the local shim's record of srun to <exit_path>.srun.json.
//
// Signal/Kill. The step is found by its name (`squeue --steps`) and signalled
// with `scancel --signal=SIG J.S` (step_control.h). Both return at once: the
// squeue/scancel calls run on the executor's worker threads, never on the
// daemon's io thread. Kill cancels the step (and SIGKILLs the srun client
// when the step will not go) in the background; the task's ExitCallback
// (signal SIGKILL) says when it is gone; failures to cancel are logged.
//
// Slurm's reason. A task that did not succeed and whose step Slurm ended
// (time limit, preemption, node failure, scancel) gets Slurm's banner in its
// exit detail: "slurm: STEP 12.3 ON vm CANCELLED AT ... DUE TO TIME LIMIT"
// (end_reason.h).
//
// TaskRef.data: {job_id, step_name, exit_path, stderr_path, marker,
// gres_devices, local: <local ref>}.
// Reattach re-attaches the srun client (local backend) and learns from the
// records what ended while the daemon was down.
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>

#include "backends/executor.h"
#include "backends/local/local_executor.h"

namespace tandem::backends {

struct SlurmExecutorOptions {
  std::string job_id;                   // the allocation the steps run in (required)
  std::filesystem::path exec_shim;      // empty: tandem-exec next to /proc/self/exe
  std::string gres = "gpu";             // owner steps request --gres=<gres>:N ("gpu:h200" typed)
  std::vector<std::string> srun_args;   // appended to every srun
  std::chrono::milliseconds kill_timeout{15000};
};

class SlurmExecutor final : public Executor {
 public:
  // Fails when the shim or srun is missing, or job_id is empty.
  static StatusOr<std::unique_ptr<SlurmExecutor>> Create(boost::asio::io_context& io,
                                                         ExitCallback on_exit,
                                                         SlurmExecutorOptions options);
  ~SlurmExecutor() override;

  std::string_view kind() const override { return "slurm"; }
  StatusOr<TaskRef> Start(const LaunchRequest& request) override;
  // Start with the step's name chosen by the caller (submit mode records it
  // before the step exists: adopted_step.h). Start uses NewStepName.
  StatusOr<TaskRef> StartNamed(const LaunchRequest& request, const std::string& step_name);
  static std::string NewStepName(const std::string& task_id);
  // GPUs held by a step this executor does not supervise (one adopted by
  // name after a restart, or still being created by an orphaned srun):
  // later steps on them are colocated (--overlap --gres=none) rather than
  // request their GRES again, until ReleaseGres(holder).
  void HoldGres(const std::string& holder, std::set<int> devices);
  void ReleaseGres(const std::string& holder);
  Status Signal(const TaskRef& ref, int sig) override;
  Status Kill(const TaskRef& ref) override;
  Status Reattach(const TaskRef& ref) override;
  bool Alive(const TaskRef& ref) override;

  const SlurmExecutorOptions& options() const { return options_; }
  // The srun command line Start() would run for `request` (tests, docs).
  std::vector<std::string> SrunCommand(const LaunchRequest& request, const std::string& step_name,
                                       bool gres_owner) const;

 private:
  struct Tracked {
    std::filesystem::path exit_path;
    std::filesystem::path stderr_path;  // where Slurm's end-of-step banner lands
    std::string marker;
    std::set<int> gres_devices;  // non-empty while this task owns GPU GRES
    bool killed = false;         // Kill was called: an exit without a record reads as SIGKILL
    bool killing = false;        // a worker is cancelling the step
    std::shared_ptr<std::atomic<bool>> ended = std::make_shared<std::atomic<bool>>(false);  // srun exited
  };
  static constexpr int kWorkers = 4;  // concurrent squeue/scancel loops
  SlurmExecutor(boost::asio::io_context& io, ExitCallback on_exit, SlurmExecutorOptions options);
  void OnLocalExit(const std::string& task_id, const TaskExit& srun_exit);

  boost::asio::io_context& io_;
  ExitCallback on_exit_;
  SlurmExecutorOptions options_;
  std::unique_ptr<LocalExecutor> local_;
  std::map<std::string, Tracked> tracked_;  // by task id
  std::map<std::string, std::set<int>> held_gres_;  // HoldGres, by holder
  std::shared_ptr<std::atomic<bool>> stop_ = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);  // posts back to io check it
  std::unique_ptr<boost::asio::thread_pool> workers_;      // squeue/scancel, off the io thread
};

}  // namespace tandem::backends
