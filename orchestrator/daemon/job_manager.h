// The job manager: turns submitted specs into placed, launched, supervised
// tasks, and jobs into their end states (issue #2, parts 3-6).
//
// Single-threaded: every method runs on the daemon's io_context, and so do
// the executor's exit callbacks and the log's durability callbacks. No locks.
//
// Every change is a journal record, applied to the JobTable with job_model's
// Apply (the same function replay uses) and published as an event to
// subscribers and to the job's <run_dir>/events.jsonl. Two kinds
// (docs/architecture.md, "Durability"):
//   - a record that starts something (job_submitted, job_cancel) is written
//     first and applied only once durable (CommitDurably): then its effect
//     follows (tasks launch, SIGTERM) and the client is answered. A journal
//     that cannot take it answers kUnavailable "journal unavailable" (HTTP
//     503 journal_unavailable) and nothing changes;
//   - a record that reports what already happened (a task started or
//     exited) is applied at once and written (Commit). If the journal
//     refuses it, memory is ahead of the journal ("diverged"): the job
//     manager starts nothing new and retries a snapshot of its whole state
//     (DurableLog::Compact) every `journal_retry` until it succeeds.
// New work (a submit, a launch) also needs the journal's headroom
// (DurableLog::Headroom), so a full disk refuses new jobs and holds launches
// while the reserve still records what runs.
//
// Lifecycle of a job:
//   pending  -- devices granted, first task launched --> running
//   running  -- every task succeeded --> succeeded
//            -- a task failed beyond its restart policy --> (others stopped) failed
//            -- cancel --> (SIGTERM, grace, SIGKILL) cancelled
// A job that needs more devices than are free waits in `pending` (FIFO,
// smaller jobs may pass it); one that can never fit is refused at submit.
//
// Waiting for capacity (docs/redis.md "Placement"): when an executor's Start
// says "nothing was started, retry later" (backends::IsRetryableStart: no
// node has the GPUs free, no live node), the task stays pending (or
// restarting) and the job pending (running if it started already), with a
// detail saying what it waits for. Schedule() tries again when a task of any
// job ends and every `capacity_retry` while anything waits. Tasks of a job
// launch in order, and a job stops at its first waiting task. Head of line:
// while a job of a backend waits, later jobs of that backend that have not
// started yet launch nothing (their detail names the job they queue
// behind), so two waiting jobs never each hold half of what both need;
// tasks of jobs that already started (restarts, the rest of a partly
// launched job) are always tried, in submission order.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "backends/executor.h"
#include "backends/port_lease.h"
#include "backends/task_env.h"
#include "common/status.h"
#include "orchestrator/daemon/job_model.h"
#include "orchestrator/daemon/daemon_metrics.h"
#include "orchestrator/daemon/run_dir_lock.h"
#include "orchestrator/spec/job_spec.h"
#include "orchestrator/store/durable_log.h"

namespace tandem::daemon {

// One state change, as shown to people and to `GET /v1/jobs/{id}/events`.
struct Event {
  uint64_t seq = 0;       // daemon-wide, increasing (restarts from the journal's count)
  nlohmann::json body;    // the journal record, plus "seq"
};

struct JobManagerOptions {
  std::filesystem::path state_dir;
  std::vector<int> gpus;                          // physical ids this daemon may hand out
  std::chrono::milliseconds grace{10000};         // SIGTERM -> SIGKILL on cancel
  uint64_t compact_every = 20000;                 // journal records between snapshots
  std::string control_endpoint;                   // TANDEM_CONTROL for tasks ("" = none)
  // Where a local job's leftover weight segments are removed when it ends
  // (weight_segments.h); "" = never.
  std::filesystem::path shm_dir = "/dev/shm";
  // The control variables of one launch (TANDEM_CONTROL, TANDEM_CONTROL_TOKEN,
  // ...; common/control/control_token.h) by backend, job id, task id and
  // launch number (1 = first). Unset: TANDEM_CONTROL = control_endpoint.
  std::function<backends::EnvMap(const std::string& backend, const std::string& job_id, const std::string& task_id,
                                 int launch)>
      control_env;
  std::string worker_binary;                      // tandem-worker, for roles with `worker`
  std::filesystem::path run_root;                 // run dirs default to <run_root>/<job id>; "" = <state_dir>/runs
  // Backends whose jobs bring their own devices (Slurm submit mode: the GPUs
  // of the job's batch allocation): their jobs are not placed on `gpus`;
  // physical ids are the logical ones, mapped by the backend.
  std::set<std::string> own_device_backends;
  // While a task waits for capacity (a retryable Start), how often Start is
  // tried again even if no task ended (a node may have registered).
  std::chrono::milliseconds capacity_retry{1000};
  // Called when a job ended (every task ended): a backend that holds
  // resources per job releases them (Slurm submit mode cancels the job's
  // batch allocation). Optional.
  std::function<void(const std::string& job_id, const std::string& backend)> on_job_ended;
  // Task limits, checked at submit (0 = none): tasks of one job, and tasks
  // of every live job together (settings.h: TANDEM_MAX_TASKS_PER_JOB, TANDEM_MAX_TASKS).
  uint64_t max_tasks_per_job = 10000;
  uint64_t max_tasks = 50000;
  // Launches per scheduling pass; the next pass is posted behind whatever
  // the io_context has queued (API requests), so a wide job does not stall
  // it (settings.h: TANDEM_LAUNCH_BATCH).
  size_t launch_batch = 32;
  // While the journal refuses records (disk full, I/O error), how often the
  // job manager tries to make its state durable again.
  std::chrono::milliseconds journal_retry{1000};
};

// The error of a journal that cannot take a record: kUnavailable, message
// "journal unavailable: <cause>" (the API answers 503 journal_unavailable).
Status JournalUnavailable(const Status& cause);
bool IsJournalUnavailable(const Status& st);

// A submit over a task limit: kResourceExhausted, its message naming the
// limit's flag and variable (the API answers `task_limit`: 429 for the
// daemon-wide limit, which frees as jobs end; 409 for the per-job one,
// which no retry passes).
enum class TaskLimitKind { kNone, kPerJob, kDaemon };
Status TaskLimitExceeded(TaskLimitKind kind, const std::string& message);
TaskLimitKind TaskLimitOf(const Status& st);

// How a task ended, for people: "exit code 3", "killed by signal 9
// (SIGKILL)", "exit status unknown", plus the executor's detail when it adds
// something (e.g. "exec failed: ...").
std::string ExitDetail(const backends::TaskExit& e);

// What the handoff service (handoff_service.h) learns from and asks of the
// job manager. Calls come on the io thread.
class TaskObserver {
 public:
  enum class Verdict {
    kDefault,     // the role's restart policy and fail-fast decide, as for any task
    kRestartNow,  // relaunch the task at once (counted against max_restarts, 3 if the role has no policy)
    kFailJob,     // the task failed and the job with it (`reason` says why)
  };
  virtual ~TaskObserver() = default;
  // A running task ended (before the job manager records anything).
  virtual Verdict OnTaskExit(const Job& job, const Task& task, const backends::TaskExit& exit,
                             std::string* reason) = 0;
  // A job reached a terminal state.
  virtual void OnJobEnded(const Job& job) = 0;
};

class JobManager {
 public:
  using SubmitCallback = std::function<void(StatusOr<nlohmann::json>)>;
  using EventCallback = std::function<void(const Event&)>;

  // `executors` maps a backend kind ("local", "slurm", "redis") to the
  // executor that runs jobs of that kind; a job of another kind is refused.
  JobManager(boost::asio::io_context& io, JobManagerOptions opts, store::DurableLog& log,
             std::map<std::string, backends::Executor*> executors, backends::PortLeaseRegistry& ports,
             DaemonMetrics& metrics);
  ~JobManager();

  // Rebuilds state from what the log recovered, re-attaches running tasks,
  // and resumes restarts and cancels that were under way. Launches are held
  // until ResumeLaunches(): the caller first kills what no re-attached task
  // claims (LocalExecutor::KillUnclaimed), so that a copy a crashed daemon
  // started but never journaled is gone before the task is launched again.
  Status Recover(const store::Recovered& recovered);
  // After Recover: launches go on (the first scheduling pass runs now).
  void ResumeLaunches();

  // Validates, places and records a job; `done` gets the job's JSON once the
  // submission is durable, or an error (kInvalidArgument with one line per
  // spec violation; kResourceExhausted when it can never fit).
  void Submit(const nlohmann::ordered_json& spec, SubmitCallback done);

  // Requests cancellation; `done` gets Ok once the job_cancel record is
  // durable (then the job's tasks are being stopped), at once if the job
  // already ended or a cancel was recorded, NotFound for no such job, or a
  // JournalUnavailable error (then nothing was changed or signalled).
  void Cancel(std::string_view job_id, std::function<void(Status)> done);
  // The same without waiting: Ok once the request is written.
  Status Cancel(std::string_view job_id);

  const JobTable& table() const { return table_; }
  const Job* Find(std::string_view job_id) const { return table_.Find(job_id); }

  // Live events of every job. Returns a token for Unsubscribe.
  uint64_t Subscribe(EventCallback cb);
  void Unsubscribe(uint64_t token);

  // The executor's exit callback (wired by the daemon).
  void OnTaskExit(const std::string& task_id, const backends::TaskExit& exit);

  void SetObserver(TaskObserver* observer) { observer_ = observer; }
  // SIGKILLs a running task; its exit comes through OnTaskExit as usual.
  Status KillTask(std::string_view job_id, std::string_view task_name);
  // Stops a job as failed (every task SIGTERM, grace, SIGKILL). No-op when it ended.
  void FailJob(std::string_view job_id, const std::string& reason);
  // The job's parsed spec (cached).
  const spec::JobSpec& SpecOf(const Job& job);

  // Stops supervising (for daemon shutdown): running tasks keep running and
  // are re-adopted by the next daemon on the same state dir.
  Status Shutdown();

 private:
  void HandleTaskExit(const std::string& task_id, const backends::TaskExit& exit);
  // Applies a record that reports what happened, then journals it (see above).
  void Commit(nlohmann::json record);
  // Journals a record that starts something; applies it (and calls `done`
  // with Ok) only once durable. `done` gets JournalUnavailable otherwise.
  void CommitDurably(nlohmann::json record, std::function<void(Status)> done);
  void Publish(const nlohmann::json& record);  // event to subscribers and events.jsonl
  void MaybeCompact();
  // Ok when new work may start: the journal holds everything in memory and has headroom.
  Status JournalReady();
  void JournalDiverged(const Status& why);  // memory is ahead of the journal: resync
  void ArmJournalRetry();
  void Schedule();                      // grant devices to pending jobs, launch pending tasks
  Status CheckTaskLimits(const spec::JobSpec& sp) const;  // max_tasks_per_job, max_tasks
  bool GrantDevices(Job& job);
  // kWaiting: no capacity now (ResourceExhausted); kBackendDown: no node or
  // service reachable (Unavailable), so no other launch on that backend is
  // tried in this pass either; kFailed: the job is being stopped.
  enum class Launch { kStarted, kWaiting, kBackendDown, kFailed };
  Launch LaunchTask(Job& job, Task& task);
  // Start said "retry later" (`why`): record what the task waits for, arm the retry timer.
  void MarkWaiting(Job& job, Task& task, const std::string& why);
  void SetJobDetail(Job& job, const std::string& detail);  // commits only a change
  void StopJob(Job& job, std::string reason);  // SIGTERM every running task, then the grace timer
  void MaybeFinishJob(Job& job);
  void StartRestartTimer(Job& job, Task& task, std::chrono::milliseconds delay);
  void WriteEventLine(const Job& job, const nlohmann::json& record);
  Job* JobOfTask(std::string_view task_id, Task** task);

  boost::asio::io_context& io_;
  JobManagerOptions opts_;
  store::DurableLog& log_;
  backends::Executor* ExecutorOf(const Job& job);  // never null for an accepted job
  std::map<std::string, backends::Executor*> executors_;
  backends::PortLeaseRegistry& ports_;
  DaemonMetrics& metrics_;
  TaskObserver* observer_ = nullptr;
  JobTable table_;
  std::set<int> busy_gpus_;
  std::map<std::string, std::unique_ptr<boost::asio::steady_timer>> timers_;  // by task or job id
  std::unique_ptr<boost::asio::steady_timer> capacity_timer_;  // set while a task waits for capacity
  bool scheduling_ = false, schedule_again_ = false;          // Schedule() is not re-entered
  std::map<std::string, spec::JobSpec> specs_;  // parsed specs by job id
  std::set<std::string> stopping_;      // job ids being stopped (cancel or failure)
  std::map<uint64_t, EventCallback> subscribers_;
  std::vector<uint64_t> unsubscribed_;  // removed after the current publication
  int publishing_ = 0;
  uint64_t next_token_ = 1;
  uint64_t event_seq_ = 0;
  bool shutting_down_ = false;
  bool launches_held_ = false;  // from Recover until ResumeLaunches
  // Submits whose job_submitted record is written but not durable yet (id -> run dir).
  struct Submitting {
    std::string run_dir;
    size_t tasks = 0;
    RunDirLock lock;
  };
  std::map<std::string, Submitting> submitting_;
  // The run dir locks of live jobs (run_dir_lock.h), released when the job ends.
  std::map<std::string, RunDirLock> run_dir_locks_;
  std::unique_ptr<boost::asio::steady_timer> batch_timer_;  // set while the next launch batch is queued
  uint64_t submit_seq_ = 1;
  bool journal_diverged_ = false;  // records applied in memory that the journal refused
  bool journal_blocked_logged_ = false;
  std::unique_ptr<boost::asio::steady_timer> journal_timer_;  // set while the journal is retried
};

}  // namespace tandem::daemon
