// Recovery: the job table rebuilt from the journal's snapshot and records,
// running tasks re-attached, and launches, restarts and cancels that were
// under way resumed (job_manager.h; docs/architecture.md "Re-adoption").
#include "orchestrator/daemon/job_manager.h"

#include "common/log.h"

namespace tandem::daemon {

namespace {
using json = nlohmann::json;
namespace fs = std::filesystem;
}  // namespace

Status JobManager::Recover(const store::Recovered& rec) {
  launches_held_ = true;  // until ResumeLaunches: nothing starts beside an unknown copy
  if (!rec.snapshot.is_null()) {
    TANDEM_ASSIGN_OR_RETURN(table_, JobTable::FromJson(rec.snapshot), "recover snapshot");
  }
  for (const auto& r : rec.records) TANDEM_RETURN_IF_ERROR(Apply(table_, r), "recover journal");
  event_seq_ = rec.records.size();
  submit_seq_ = table_.next_seq;
  for (const auto& w : rec.warnings) log::Warn("store", "{}", w);
  size_t reattached = 0;
  for (auto& job : table_.jobs) {
    if (IsTerminal(job.state)) continue;
    // The run dir is the job's again; one another process took meanwhile
    // (this daemon was down) is shared now: said, not fatal to the job.
    if (auto lock = RunDirLock::Acquire(job.run_dir); lock.ok())
      run_dir_locks_[job.id] = std::move(lock).value();
    else
      log::Warn("jobs", "run dir lock of job={} not taken again: {}", job.id, lock.status().ToString());
    if (!opts_.own_device_backends.count(job.backend))
      for (int g : job.physical_devices) busy_gpus_.insert(g);
    for (auto& t : job.tasks) {
      if (t.state == TaskState::kRunning) {
        if (!t.ports.empty())
          if (Status ps = ports_.Adopt(t.id, t.ports); !ps.ok())
            log::Warn("jobs", "ports of task={} not re-adopted: {}", t.id, ps.ToString());
        auto ref = backends::TaskRef::FromJson(t.ref);
        backends::Executor* ex = ExecutorOf(job);
        Status st = !ref.ok() ? ref.status()
                    : ex ? ex->Reattach(*ref)
                         : FailedPrecondition("backend \"" + job.backend + "\" is not enabled in this daemon");
        if (!st.ok()) {
          Commit({{"type", "task_state"}, {"job", job.id}, {"task", t.name}, {"state", "lost"},
                  {"detail", "could not re-attach: " + st.message()}});
        } else {
          ++reattached;
        }
      } else if (t.state == TaskState::kRestarting) {
        StartRestartTimer(job, t, std::chrono::milliseconds(0));
      }
    }
  }
  log::Info("jobs", "recovered jobs={} reattached_tasks={}", table_.jobs.size(), reattached);
  for (auto& job : table_.jobs) {
    if (IsTerminal(job.state)) continue;
    bool failed = false;
    for (const auto& t : job.tasks) failed |= (t.state == TaskState::kFailed || t.state == TaskState::kLost);
    if (job.cancel_requested) StopJob(job, "cancelled");
    else if (failed) StopJob(job, "a task failed");
    else MaybeFinishJob(job);
  }
  return Status::Ok();
}

void JobManager::ResumeLaunches() {
  launches_held_ = false;
  Schedule();
}

}  // namespace tandem::daemon
