// The Slurm backend in submit mode (issue #5 items 1-4; docs/slurm.md
// "Submit mode"): tandemd outside any allocation submits one batch job per
// tandem job with the spec's scheduling options (sbatch_args.h), tracks it,
// runs the job's tasks as steps of it through the allocation-mode executor
// (slurm_executor.h), and cancels it when the daemon is done with the job
// (JobEnded).
//
// Lifecycle of a tandem job's batch job (one per tandem job id):
//   Start of its first task -> submitted on a worker (batch_control.h:
//   libslurm's slurm_submit_batch_job or `sbatch --parsable`; the io thread
//   never waits for Slurm), tasks started meanwhile queue -> the batch job id
//   is written to <run_dir>/slurm-batch.json -> polled every `poll` on a
//   worker -> each state change is logged with Slurm's reason
//   ([slurm] batch job=J tandem_job=X state=PENDING reason=Resources).
//   Tasks started while it is pending wait in a queue; when it runs, the
//   allocation's nodes and GPUs are read (scontrol show job -d) and each
//   queued task becomes a step, its logical CUDA_VISIBLE_DEVICES mapped onto
//   them; over several nodes, each task is placed on one node
//   (step_placement.h) and its step runs there (`srun -w node`).
//   When it ends on Slurm's side (time limit, preemption, node failure, an
//   outside scancel), queued tasks exit with "slurm: batch job J ended
//   before the task started: TIMEOUT (TimeLimit)", running steps end with
//   Slurm's banner (end_reason.h) plus the batch job's state. A requeued
//   batch job goes back to pending: its steps ended (the restart policy
//   decides), restarted tasks queue until it runs again.
//   JobEnded(tandem job) -> `scancel J` (steps and batch job; nothing left).
//
// Restart. TaskRef.data = {mode: "submit", job_id: <batch job, "" while it
// was being submitted>, tandem_job, exit_path}. Start writes the launch
// request to <exit_path>.launch.json and, once the step is started, the
// allocation-mode ref to <exit_path>.step.json (the run dir). Reattach adopts
// the batch job by id (an empty id: from <run_dir>/slurm-batch.json, else
// `squeue --name=<tandem job>` on a worker, else it was never submitted and
// is submitted now) and either re-attaches the step or, if it never started,
// queues the task again. A task with an intent record but no .step.json is
// resolved on workers (step_intent.h): adopted by name, started again only
// once no srun client of it lives and no step of it exists, or ended with
// status unknown. Reattach itself never blocks the io thread on Slurm: every
// squeue runs on a worker, and a task being resolved counts as alive.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <nlohmann/json.hpp>

#include "backends/executor.h"
#include "backends/fault_injection.h"
#include "backends/slurm/adopted_step.h"
#include "backends/slurm/allocation.h"
#include "backends/slurm/batch_control.h"
#include "backends/slurm/batch_job.h"
#include "backends/slurm/slurm_executor.h"
#include "backends/slurm/step_intent.h"

namespace tandem::backends {

// What submit mode needs to know about a tandem job (the daemon answers
// from the job's spec).
struct SlurmJobInfo {
  nlohmann::json options = nlohmann::json::object();  // the spec's backend object
  int devices = 0;                                     // the job's device count
  int tasks = 1;                                       // --ntasks: the job's GPU-owning tasks (at least 1)
  std::filesystem::path run_dir;                       // batch script output goes to <run_dir>/slurm-batch.out
};

struct SlurmSubmitOptions {
  std::filesystem::path exec_shim;  // empty: tandem-exec next to /proc/self/exe
  std::function<StatusOr<SlurmJobInfo>(const std::string& tandem_job)> job_info;  // required
  std::chrono::milliseconds poll{1000};  // batch job state
  std::chrono::milliseconds kill_timeout{15000};
  // Submit/query/cancel of batch jobs (batch_control.h); null: the CLI.
  std::shared_ptr<slurm::BatchJobControl> control;
  // After a restart, how long a living srun client of a step recorded only
  // by its intent may take to create the step before it is stopped and the
  // task started again (step_intent.h). Tests lower it with
  // TANDEM_TEST_SLURM_STEP_CREATE_WAIT_MS.
  std::chrono::milliseconds step_create_wait{60000};
  // Test-only fault points (fault_injection.h): "slurm.after_submit",
  // "slurm.after_step_start". Null in production.
  std::shared_ptr<const FaultPoints> faults;
};

class SlurmSubmitExecutor final : public Executor {
 public:
  // Fails when sbatch or srun is missing or job_info is unset.
  static StatusOr<std::unique_ptr<SlurmSubmitExecutor>> Create(boost::asio::io_context& io, ExitCallback on_exit,
                                                               SlurmSubmitOptions options);
  ~SlurmSubmitExecutor() override;

  std::string_view kind() const override { return "slurm"; }
  StatusOr<TaskRef> Start(const LaunchRequest& request) override;
  Status Signal(const TaskRef& ref, int sig) override;
  Status Kill(const TaskRef& ref) override;
  Status Reattach(const TaskRef& ref) override;
  bool Alive(const TaskRef& ref) override;
  // The daemon is done with tandem job `job_id` (it ended; none of its tasks
  // runs): cancels its batch job (steps and holding script) in the
  // background. The daemon calls it through JobManagerOptions::on_job_ended.
  void JobEnded(const std::string& job_id);

  // The batch job of a tandem job ("" when none): tests, logs.
  std::string BatchJobOf(const std::string& tandem_job) const;

 private:
  struct Batch {
    std::string id;
    std::string tandem_job;
    int devices = 0;                        // the job's GPUs: steps wait until the allocation's are known
    slurm::BatchState state;
    slurm::Allocation alloc;                // its nodes and GPUs while it runs (gpus empty: not known yet)
    std::unique_ptr<SlurmExecutor> steps;   // allocation mode on this batch job
    std::deque<LaunchRequest> queued;       // started while the batch job was not running
    std::map<std::string, TaskRef> launched;  // task id -> allocation-mode ref
    std::unique_ptr<boost::asio::steady_timer> timer;
    bool polling = false;
    bool cancelled = false;                 // JobEnded: scancel sent
  };
  // A batch job being submitted on a worker, and the tasks waiting for it.
  struct Submitting {
    std::deque<LaunchRequest> queued;
    std::filesystem::path run_dir;
    bool ended = false;  // JobEnded while submitting: cancel it once it has an id
  };
  SlurmSubmitExecutor(boost::asio::io_context& io, ExitCallback on_exit, SlurmSubmitOptions options);
  Status SubmitAsync(const std::string& tandem_job);
  void OnSubmitted(const std::string& tandem_job, StatusOr<std::string> id);
  std::string KnownBatchOf(const std::string& tandem_job);
  void FindBatchThenReattach(const std::string& task_id, int attempt);
  StatusOr<Batch*> Adopt(const std::string& batch_id, const std::string& tandem_job);
  // Reattach once the task's batch job id is known ("" : never submitted).
  Status ReattachTo(const TaskRef& ref, const std::string& batch_id);
  void OnIntentResolved(const std::string& task_id, const slurm::IntentResolver::Outcome& outcome);
  void QueueAgain(const std::string& task_id, const std::string& batch_id, const std::filesystem::path& exit_path);
  void Poll(const std::string& batch_id);
  void OnState(const std::string& batch_id, StatusOr<slurm::BatchState> state, slurm::Allocation alloc);
  void Launch(Batch& b, const LaunchRequest& req);
  void OnStepExit(const std::string& batch_id, const std::string& task_id, TaskExit exit);
  void PostExit(const std::string& task_id, TaskExit exit);
  Batch* BatchOfTask(const std::string& tandem_job, const std::string& batch_id);  // "" id: the job's current one

  boost::asio::io_context& io_;
  ExitCallback on_exit_;
  SlurmSubmitOptions options_;
  std::map<std::string, std::unique_ptr<Batch>> batches_;  // by batch job id
  std::map<std::string, std::string> batch_of_job_;        // tandem job -> batch job id
  std::map<std::string, Submitting> submitting_;           // by tandem job
  std::shared_ptr<std::atomic<bool>> stop_ = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
  std::unique_ptr<boost::asio::thread_pool> workers_;
  std::unique_ptr<slurm::AdoptedSteps> adopted_;  // steps found by name after a restart
  std::unique_ptr<slurm::IntentResolver> resolver_;  // intents without .step.json after a restart
  struct Pending {  // a task whose re-attach waits for a worker (squeue --name, an intent)
    TaskRef ref;
    std::string batch_id;
    std::filesystem::path exit_path;
    bool killed = false;
    int signal = 0;
  };
  std::map<std::string, Pending> pending_;  // by task id
};

}  // namespace tandem::backends
