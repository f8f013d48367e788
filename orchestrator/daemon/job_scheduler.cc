// Scheduling: devices granted to pending jobs in submission order, pending
// tasks launched in bounded batches, waiting for capacity and head-of-line
// blocking (job_manager.h, "Waiting for capacity"; docs/architecture.md "Scheduling").
#include "orchestrator/daemon/job_manager.h"

#include <algorithm>

#include "common/log.h"
#include "orchestrator/daemon/job_decisions.h"

namespace tandem::daemon {

namespace {
using json = nlohmann::json;
namespace fs = std::filesystem;

// Job details while a task waits for capacity (Schedule), cleared once it launched.
constexpr const char* kWaitingPrefix = "waiting for capacity";
constexpr const char* kQueuedPrefix = "queued behind job ";
}  // namespace

bool JobManager::GrantDevices(Job& job) {
  if (job.logical_devices.empty() || !job.physical_devices.empty()) return true;
  if (opts_.own_device_backends.count(job.backend)) {
    Commit({{"type", "job_devices"}, {"job", job.id}, {"physical_devices", job.logical_devices}});
    return true;
  }
  const bool explicit_ids = SpecOf(job).raw.contains("devices") && SpecOf(job).raw["devices"].contains("ids");
  const std::optional<std::vector<int>> chosen = ChooseDevices(opts_.gpus, busy_gpus_, job.logical_devices, explicit_ids);
  if (!chosen) return false;
  const std::vector<int>& grant = *chosen;
  for (int g : grant) busy_gpus_.insert(g);
  Commit({{"type", "job_devices"}, {"job", job.id}, {"physical_devices", grant}});
  return true;
}

void JobManager::Schedule() {
  if (shutting_down_ || launches_held_) return;
  if (scheduling_) {  // a launch failure stopped a job, which ended and asked again
    schedule_again_ = true;
    return;
  }
  // Nothing new starts unless the journal holds everything and has headroom.
  if (Status ready = JournalReady(); !ready.ok()) {
    if (!journal_blocked_logged_)
      log::Warn("jobs", "launches held until the journal has space error=\"{}\"", ready.ToString());
    journal_blocked_logged_ = true;
    return ArmJournalRetry();
  }
  if (journal_blocked_logged_) log::Info("jobs", "journal has space again; launches resume");
  journal_blocked_logged_ = false;
  scheduling_ = true;
  size_t budget = std::max<size_t>(opts_.launch_batch, 1);  // launches in this call
  bool more = false;  // the budget ran out: the next batch is posted
  do {
    schedule_again_ = false;
    // Backend -> the job at the head of its line that waits for capacity.
    std::map<std::string, std::string> blocked_by;
    std::set<std::string> down;  // backends that said Unavailable in this pass: not asked again
    for (auto& job : table_.jobs) {
      if (IsTerminal(job.state) || job.cancel_requested || stopping_.count(job.id)) continue;
      const bool started = job.state == JobState::kRunning;
      if (started && down.count(job.backend)) continue;
      if (auto head = blocked_by.find(job.backend); !started && head != blocked_by.end()) {
        SetJobDetail(job, std::string(kQueuedPrefix) + head->second + ", which waits for capacity");
        continue;
      }
      if (!GrantDevices(job)) {
        const std::string why = "waiting for " + std::to_string(job.logical_devices.size()) +
                                " devices (" + std::to_string(opts_.gpus.size() - busy_gpus_.size()) + " free)";
        if (job.detail != why) Commit({{"type", "job_state"}, {"job", job.id}, {"state", "pending"}, {"detail", why}});
        continue;
      }
      Launch outcome = Launch::kStarted;
      bool launched = false;
      for (auto& task : job.tasks) {
        // A restarting task without its backoff timer waits for capacity.
        const bool relaunch = task.state == TaskState::kRestarting && !timers_.count(job.id + "/" + task.name);
        if (task.state != TaskState::kPending && !relaunch) continue;
        if (budget == 0) {
          more = true;
          break;
        }
        outcome = LaunchTask(job, task);
        if (outcome != Launch::kStarted) break;  // in order: a job stops at its first waiting task
        launched = true;
        --budget;
      }
      if (outcome == Launch::kFailed || IsTerminal(job.state) || stopping_.count(job.id)) continue;
      if (outcome == Launch::kBackendDown) {
        down.insert(job.backend);
        outcome = Launch::kWaiting;
      }
      if (outcome == Launch::kWaiting) blocked_by.emplace(job.backend, job.id);
      const bool stale = job.detail.rfind(kWaitingPrefix, 0) == 0 || job.detail.rfind(kQueuedPrefix, 0) == 0;
      if (job.state == JobState::kPending && launched)
        Commit({{"type", "job_state"}, {"job", job.id}, {"state", "running"},
                {"detail", outcome == Launch::kWaiting ? job.detail : ""}});
      else if (job.state == JobState::kPending && outcome == Launch::kStarted)
        Commit({{"type", "job_state"}, {"job", job.id}, {"state", "running"}, {"detail", ""}});
      else if (outcome == Launch::kStarted && stale)
        SetJobDetail(job, "");
      if (more) break;  // later jobs wait for the next batch: submission order holds
    }
  } while (schedule_again_ && !more && !shutting_down_);
  scheduling_ = false;
  if (more && !batch_timer_) {
    // Behind whatever the io_context has queued (API requests, exits).
    batch_timer_ = std::make_unique<boost::asio::steady_timer>(io_, std::chrono::milliseconds(0));
    batch_timer_->async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      batch_timer_.reset();
      Schedule();
    });
  }
}

void JobManager::SetJobDetail(Job& job, const std::string& detail) {
  if (job.detail == detail) return;
  Commit({{"type", "job_state"}, {"job", job.id}, {"state", ToString(job.state)}, {"detail", detail}});
}

void JobManager::MarkWaiting(Job& job, Task& task, const std::string& why) {
  const std::string detail = std::string(kWaitingPrefix) + ": task " + task.name + ": " + why;
  if (job.detail != detail) log::Info("jobs", "task waiting for capacity task={} reason=\"{}\"", task.id, why);
  const std::string task_detail = std::string(kWaitingPrefix) + ": " + why;
  if (task.state == TaskState::kPending && task.detail != task_detail)  // a restarting one keeps its exit's detail
    Commit({{"type", "task_state"}, {"job", job.id}, {"task", task.name}, {"state", "pending"},
            {"detail", task_detail}});
  SetJobDetail(job, detail);
  if (capacity_timer_) return;
  capacity_timer_ = std::make_unique<boost::asio::steady_timer>(io_, opts_.capacity_retry);
  capacity_timer_->async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    capacity_timer_.reset();  // re-armed by whatever still waits
    Schedule();
  });
}

}  // namespace tandem::daemon
