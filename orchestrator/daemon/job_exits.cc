// Exits and restarts: a task that ended is recorded, restarted by its role's
// restart policy (or the handoff service's verdict), or ends its job
// (job_manager.h, "Lifecycle of a job").
#include "orchestrator/daemon/job_manager.h"

#include <signal.h>

#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "orchestrator/daemon/job_decisions.h"

namespace tandem::daemon {

namespace {
using json = nlohmann::json;
namespace fs = std::filesystem;
}  // namespace

std::string ExitDetail(const backends::TaskExit& e) {
  if (!e.status_known) return e.detail.empty() ? "exit status unknown" : e.detail;
  std::string s;
  if (e.signal) s = "killed by signal " + std::to_string(e.signal) + " (" + (sigabbrev_np(e.signal) ? std::string("SIG") + sigabbrev_np(e.signal) : "?") + ")";
  else s = "exit code " + std::to_string(e.exit_code);
  // The shim's own detail repeats how the command ended; keep only news.
  if (!e.detail.empty() && e.detail.rfind("killed by signal", 0) != 0 && e.detail.rfind("exit", 0) != 0)
    s += ": " + e.detail;
  return s;
}

// ---------------------------------------------------------------- exits

Job* JobManager::JobOfTask(std::string_view task_id, Task** task) {
  for (auto& job : table_.jobs) {
    if (IsTerminal(job.state)) continue;
    if (Task* t = job.FindTask(task_id)) { *task = t; return &job; }
  }
  return nullptr;
}

void JobManager::OnTaskExit(const std::string& task_id, const backends::TaskExit& exit) {
  HandleTaskExit(task_id, exit);
  if (capacity_timer_ && !shutting_down_) Schedule();  // the task's capacity is free now
}

void JobManager::HandleTaskExit(const std::string& task_id, const backends::TaskExit& exit) {
  if (shutting_down_) return;
  ports_.Release(task_id);
  Task* task = nullptr;
  Job* job = JobOfTask(task_id, &task);
  if (!job || task->state != TaskState::kRunning) {
    log::Warn("jobs", "exit of unknown or not-running task={} ignored", task_id);
    return;
  }
  const std::string detail = ExitDetail(exit);
  const json ex = exit.ToJson();
  log::Info("jobs", "task exited task={} {}", task_id, detail);
  const spec::RoleSpec* role = SpecOf(*job).FindRole(task->role);
  const spec::RestartPolicy rs = role ? role->restart : spec::RestartPolicy{};
  std::string reason;
  const TaskObserver::Verdict verdict =
      observer_ && !job->cancel_requested && !stopping_.count(job->id)
          ? observer_->OnTaskExit(*job, *task, exit, &reason)
          : TaskObserver::Verdict::kDefault;
  if (verdict == TaskObserver::Verdict::kRestartNow) {
    const int max = rs.kind == spec::RestartPolicy::Kind::kNever ? 3 : rs.max_restarts;
    if (task->restarts < max) {
      Commit({{"type", "task_state"}, {"job", job->id}, {"task", task->name}, {"state", "restarting"},
              {"detail", detail + "; handoff restart " + std::to_string(task->restarts + 1) + "/" +
                             std::to_string(max)},
              {"exit", ex}, {"ports", json::array()}, {"restarts", task->restarts + 1}});
      metrics_.task_restarts->Get().Inc();
      return StartRestartTimer(*job, *task, std::chrono::milliseconds(0));
    }
    reason = "handoff restarts exhausted (" + std::to_string(max) + "): " + detail;
  }
  if (verdict != TaskObserver::Verdict::kDefault) {
    Commit({{"type", "task_state"}, {"job", job->id}, {"task", task->name},
            {"state", exit.status_known ? "failed" : "lost"}, {"detail", detail}, {"exit", ex},
            {"ports", json::array()}});
    return StopJob(*job, reason);
  }
  if (job->cancel_requested || stopping_.count(job->id)) {
    const bool ok_exit = exit.succeeded();
    const char* st = job->cancel_requested ? "cancelled" : (ok_exit ? "succeeded" : "cancelled");
    Commit({{"type", "task_state"}, {"job", job->id}, {"task", task->name}, {"state", st},
            {"detail", detail}, {"exit", ex}, {"ports", json::array()}});
    return MaybeFinishJob(*job);
  }
  const bool ok = exit.succeeded();
  if (const RestartDecision again = DecideRestart(rs, task->restarts, ok); again.restart) {
    const double delay_s = again.delay_s;
    Commit({{"type", "task_state"}, {"job", job->id}, {"task", task->name}, {"state", "restarting"},
            {"detail", detail + "; restart " + std::to_string(task->restarts + 1) + "/" +
                           std::to_string(rs.max_restarts) + " in " + std::to_string(delay_s) + "s"},
            {"exit", ex}, {"ports", json::array()}, {"restarts", task->restarts + 1}});
    metrics_.task_restarts->Get().Inc();
    return StartRestartTimer(*job, *task, std::chrono::milliseconds(static_cast<int64_t>(delay_s * 1000)));
  }
  if (ok) {
    Commit({{"type", "task_state"}, {"job", job->id}, {"task", task->name}, {"state", "succeeded"},
            {"detail", detail}, {"exit", ex}, {"ports", json::array()}});
    return MaybeFinishJob(*job);
  }
  Commit({{"type", "task_state"}, {"job", job->id}, {"task", task->name},
          {"state", exit.status_known ? "failed" : "lost"}, {"detail", detail}, {"exit", ex},
          {"ports", json::array()}});
  StopJob(*job, "task " + task->name + " " + (exit.status_known ? "failed" : "was lost") + ": " + detail);
}

void JobManager::StartRestartTimer(Job& job, Task& task, std::chrono::milliseconds delay) {
  auto timer = std::make_unique<boost::asio::steady_timer>(io_, delay);
  const std::string job_id = job.id, name = task.name;
  timer->async_wait([this, job_id, name](const boost::system::error_code& ec) {
    if (ec) return;
    timers_.erase(job_id + "/" + name);
    Schedule();  // launches the task (no timer now), in its job's turn; it may wait for capacity
  });
  timers_[job.id + "/" + task.name] = std::move(timer);
}

}  // namespace tandem::daemon
