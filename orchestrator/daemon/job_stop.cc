// Stopping jobs: cancel (durable before any signal), failure, SIGTERM ->
// grace -> SIGKILL, and the end state of a job whose tasks all ended
// (job_manager.h, "Lifecycle of a job").
#include "orchestrator/daemon/job_manager.h"

#include <signal.h>

#include "common/log.h"
#include "orchestrator/daemon/weight_segments.h"

namespace tandem::daemon {

namespace {
using json = nlohmann::json;
namespace fs = std::filesystem;
}  // namespace

void JobManager::Cancel(std::string_view job_id, std::function<void(Status)> done) {
  Job* job = table_.Find(job_id);
  if (!job) return done(NotFound("no job " + std::string(job_id)));
  if (IsTerminal(job->state) || job->cancel_requested) return done(Status::Ok());
  // Recorded before any task is signalled: after a crash the job comes back
  // as cancelled, never as failed by the SIGTERM it was sent.
  const std::string id = job->id;
  CommitDurably({{"type", "job_cancel"}, {"job", id}}, [this, id, done](Status st) {
    if (!st.ok()) return done(st);
    if (Job* j = table_.Find(id); j && !IsTerminal(j->state)) StopJob(*j, "cancelled");
    done(Status::Ok());
  });
}

Status JobManager::Cancel(std::string_view job_id) {
  if (!table_.Find(job_id)) return NotFound("no job " + std::string(job_id));
  Cancel(job_id, [id = std::string(job_id)](Status st) {
    if (!st.ok()) log::Warn("jobs", "cancel job={} failed: {}", id, st.ToString());
  });
  return Status::Ok();
}

Status JobManager::KillTask(std::string_view job_id, std::string_view task_name) {
  Job* job = table_.Find(job_id);
  Task* t = job ? job->FindTask(task_name) : nullptr;
  if (!t) return NotFound("no task " + std::string(job_id) + "/" + std::string(task_name));
  if (t->state != TaskState::kRunning) return Status::Ok();
  TANDEM_ASSIGN_OR_RETURN(auto ref, backends::TaskRef::FromJson(t->ref), "task ref");
  backends::Executor* ex = ExecutorOf(*job);
  if (!ex) return FailedPrecondition("backend \"" + job->backend + "\" is not enabled in this daemon");
  log::Info("jobs", "killing task={} on request", t->id);
  return ex->Kill(ref);
}

void JobManager::FailJob(std::string_view job_id, const std::string& reason) {
  Job* job = table_.Find(job_id);
  if (!job || IsTerminal(job->state)) return;
  job->detail = reason;
  StopJob(*job, reason);
}

void JobManager::StopJob(Job& job, std::string reason) {
  if (!stopping_.insert(job.id).second) return MaybeFinishJob(job);
  log::Info("jobs", "stopping job={} reason=\"{}\"", job.id, reason);
  if (job.detail.empty() || !job.cancel_requested) job.detail = reason;  // in memory until the end record
  for (auto& t : job.tasks) {
    if (t.state == TaskState::kPending || t.state == TaskState::kRestarting) {
      timers_.erase(job.id + "/" + t.name);
      Commit({{"type", "task_state"}, {"job", job.id}, {"task", t.name}, {"state", "cancelled"},
              {"detail", "not started: " + reason}});
    } else if (t.state == TaskState::kRunning) {
      if (auto ref = backends::TaskRef::FromJson(t.ref); ref.ok() && ExecutorOf(job)) {
        if (Status st = ExecutorOf(job)->Signal(*ref, SIGTERM); !st.ok())
          log::Warn("jobs", "SIGTERM task={} failed: {}", t.id, st.ToString());
      }
    }
  }
  auto timer = std::make_unique<boost::asio::steady_timer>(io_, opts_.grace);
  const std::string id = job.id;
  timer->async_wait([this, id](const boost::system::error_code& ec) {
    if (ec) return;
    Job* j = table_.Find(id);
    if (!j || IsTerminal(j->state)) return;
    for (auto& t : j->tasks) {
      if (t.state != TaskState::kRunning) continue;
      auto ref = backends::TaskRef::FromJson(t.ref);
      if (!ref.ok() || !ExecutorOf(*j)) continue;
      log::Warn("jobs", "grace period over, killing task={}", t.id);
      if (Status st = ExecutorOf(*j)->Kill(*ref); !st.ok()) log::Error("jobs", "kill task={}: {}", t.id, st.ToString());
    }
  });
  timers_[job.id + "/stop"] = std::move(timer);
  MaybeFinishJob(job);
}

void JobManager::MaybeFinishJob(Job& job) {
  if (IsTerminal(job.state)) return;
  bool any_failed = false, all_ok = true;
  for (const auto& t : job.tasks) {
    if (!IsTerminal(t.state)) return;
    any_failed |= (t.state == TaskState::kFailed || t.state == TaskState::kLost);
    all_ok &= (t.state == TaskState::kSucceeded);
  }
  std::string state = "succeeded", detail;
  if (job.cancel_requested) { state = "cancelled"; detail = "cancelled by request"; }
  else if (any_failed || !all_ok) {
    state = "failed";
    detail = job.detail;
    if (detail.empty())
      for (const auto& t : job.tasks)
        if (t.state == TaskState::kFailed || t.state == TaskState::kLost) { detail = "task " + t.name + ": " + t.detail; break; }
  }
  timers_.erase(job.id + "/stop");
  stopping_.erase(job.id);
  specs_.erase(job.id);
  run_dir_locks_.erase(job.id);  // another process may use the run dir now
  if (!opts_.own_device_backends.count(job.backend))
    for (int g : job.physical_devices) busy_gpus_.erase(g);
  if (!job.physical_devices.empty())
    Commit({{"type", "job_devices"}, {"job", job.id}, {"physical_devices", json::array()}});
  Commit({{"type", "job_state"}, {"job", job.id}, {"state", state}, {"detail", detail}});
  metrics_.jobs_finished->WithLabels({state}).Inc();
  if (observer_) observer_->OnJobEnded(job);
  // Weight segments of publishers that could not clean up (killed, cancelled).
  if (job.backend == "local" && !opts_.shm_dir.empty())
    if (const size_t n = RemoveJobWeightSegments(job, opts_.shm_dir); n > 0)
      log::Info("jobs", "removed {} shm weight segments the job left job={}", n, job.id);
  if (opts_.on_job_ended) opts_.on_job_ended(job.id, job.backend);  // e.g. cancel its Slurm allocation
  log::Info("jobs", "job ended job={} state={} detail=\"{}\"", job.id, state, detail);
  Schedule();  // devices may have freed up
}

}  // namespace tandem::daemon
