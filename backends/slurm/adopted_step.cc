// Steps adopted by name after a daemon restart: see adopted_step.h.
#include "backends/slurm/adopted_step.h"

#include <signal.h>

#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "backends/local/exit_record.h"
#include "backends/slurm/end_reason.h"
#include "backends/slurm/step_control.h"
#include "common/json_field.h"
#include "common/log.h"
#include "common/task_file.h"

namespace tandem::backends::slurm {

namespace {

// The exit record at `exit_path` if it was written at or after `since_ms`.
std::optional<nlohmann::json> ExitRecordSince(const std::filesystem::path& exit_path, int64_t since_ms) {
  auto j = ReadTaskJson(exit_path, local::kMaxExitRecordBytes);
  if (!j || IntField(*j, "ended_at_ms", 0) < since_ms) return std::nullopt;
  return j;
}

}  // namespace

bool HasExitRecordSince(const std::filesystem::path& exit_path, int64_t since_ms) {
  return ExitRecordSince(exit_path, since_ms).has_value();
}

AdoptedSteps::AdoptedSteps(boost::asio::io_context& io, boost::asio::thread_pool& workers, ExitCallback on_exit,
                           std::chrono::milliseconds poll)
    : io_(io), workers_(workers), on_exit_(std::move(on_exit)), poll_(poll) {}

AdoptedSteps::~AdoptedSteps() {
  stop_->store(true);
  alive_.reset();
}

void AdoptedSteps::Adopt(const std::string& task_id, const std::string& job_id, const std::string& step_name,
                         const std::filesystem::path& exit_path, const std::filesystem::path& stderr_path,
                         int64_t since_ms) {
  Step s{job_id, step_name, exit_path, stderr_path, since_ms, false, std::make_unique<boost::asio::steady_timer>(io_)};
  steps_[task_id] = std::move(s);
  log::Info("slurm", "adopted step={} task={} batch job={} (found by name; no srun client to re-attach)", step_name,
            task_id, job_id);
  Check(task_id);
}

void AdoptedSteps::Check(const std::string& task_id) {
  auto it = steps_.find(task_id);
  if (it == steps_.end() || stop_->load()) return;
  const Step& s = it->second;
  boost::asio::post(workers_, [this, weak = std::weak_ptr<int>(alive_), stop = stop_, task_id, job = s.job_id,
                               name = s.step_name, exit_path = s.exit_path, stderr_path = s.stderr_path,
                               since = s.since_ms] {
    if (stop->load()) return;
    // A squeue that does not answer says nothing: look again later.
    auto step = LookupStep(job, name);
    const bool running = !step.ok() || !step->empty();
    std::optional<TaskExit> exit;
    std::string banner;
    if (!running) {
      banner = BannerInFiles({stderr_path, exit_path.empty() ? exit_path : std::filesystem::path(exit_path.string() + ".srun.log")});
      // The record tandem-exec wrote in the step, if it is this run's.
      if (auto j = ExitRecordSince(exit_path, since)) exit = local::ReadExitRecord(exit_path, StringField(*j, "marker"));
    }
    boost::asio::post(io_, [this, weak, task_id, running, exit = std::move(exit), banner]() mutable {
      if (!weak.lock()) return;
      auto found = steps_.find(task_id);
      if (found == steps_.end()) return;
      if (running) {
        found->second.timer->expires_after(poll_);
        found->second.timer->async_wait([this, weak, task_id](const boost::system::error_code& ec) {
          if (!ec && weak.lock()) Check(task_id);
        });
        return;
      }
      TaskExit x;
      if (exit) {
        x = *exit;
      } else {
        // Ended by Slurm or from outside (scancel, node failure), or its
        // record was lost: how it ended is not known, unless we killed it.
        x.exit_code = -1;
        x.signal = found->second.killed ? SIGKILL : 0;
        x.status_known = found->second.killed;
        x.detail = "step " + found->second.step_name + " ended with no exit record" +
                   (found->second.killed ? "" : " (exit status unknown)");
        x.ended_at = std::chrono::system_clock::now();
      }
      if (!x.succeeded() && !banner.empty()) x.detail = "slurm: " + banner + "; " + x.detail;
      else if (!exit) x.detail = "slurm: " + x.detail;
      const std::string batch_id = found->second.job_id;
      steps_.erase(found);
      on_exit_(task_id, batch_id, x);
    });
  });
}

void AdoptedSteps::Signal(const std::string& task_id, int sig) {
  auto it = steps_.find(task_id);
  if (it == steps_.end()) return;
  boost::asio::post(workers_, [job = it->second.job_id, name = it->second.step_name, sig, stop = stop_] {
    std::atomic<bool> no_client{true};
    if (Status st = SignalStep({job, name, &no_client, stop.get()}, sig, std::chrono::seconds(2)); !st.ok())
      log::Warn("slurm", "signal adopted step {}: {}", name, st.ToString());
  });
}

void AdoptedSteps::Kill(const std::string& task_id) {
  auto it = steps_.find(task_id);
  if (it == steps_.end()) return;
  it->second.killed = true;
  boost::asio::post(workers_, [job = it->second.job_id, name = it->second.step_name, stop = stop_] {
    std::atomic<bool> no_client{true};
    ClientActions none{[] {}, [] {}};
    if (Status st = KillStep({job, name, &no_client, stop.get()}, none, std::chrono::seconds(5),
                             std::chrono::seconds(15));
        !st.ok())
      log::Warn("slurm", "kill adopted step {}: {}", name, st.ToString());
  });
}

}  // namespace tandem::backends::slurm
