// Step signal and cancel through squeue/scancel: see step_control.h.
#include "backends/slurm/step_control.h"

#include <sstream>
#include <thread>

#include "backends/slurm/slurm_cli.h"

namespace tandem::backends::slurm {
namespace {

bool Set(const std::atomic<bool>* flag) { return flag && flag->load(); }

constexpr auto kPoll = std::chrono::milliseconds(50);

}  // namespace

std::string FindStep(const std::string& job_id, const std::string& step_name) {
  auto step = LookupStep(job_id, step_name);
  return step.ok() ? *step : "";
}

StatusOr<std::string> LookupStep(const std::string& job_id, const std::string& step_name) {
  TANDEM_ASSIGN_OR_RETURN(auto r, RunCommand({"squeue", "--noheader", "--steps", "--jobs=" + job_id, "--format=%i|%j"}),
                          "squeue --steps --jobs=" + job_id);
  if (!r.ok()) {
    // A job Slurm has purged has no steps.
    if (r.err.find("Invalid job id") != std::string::npos) return std::string();
    return Unavailable("squeue --steps --jobs=" + job_id + ": " + r.err);
  }
  std::stringstream ss(r.out);
  std::string line;
  while (std::getline(ss, line)) {
    size_t bar = line.find('|');
    if (bar != std::string::npos && line.substr(bar + 1) == step_name) return line.substr(0, bar);
  }
  return std::string();
}

Status SignalStep(const StepHandle& h, int sig, std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  std::string step;
  while ((step = FindStep(h.job_id, h.step_name)).empty()) {
    if (Set(h.client_ended) || Set(h.stop) || std::chrono::steady_clock::now() > deadline) return Status::Ok();
    std::this_thread::sleep_for(kPoll);
  }
  const std::string signal = "--signal=" + std::to_string(sig);
  TANDEM_ASSIGN_OR_RETURN(auto res, RunCommand({"scancel", signal, step}), "signal step " + step);
  if (!res.ok() && FindStep(h.job_id, h.step_name) == step)
    return Unavailable("scancel " + signal + " " + step + ": " + res.err);
  return Status::Ok();
}

Status KillStep(const StepHandle& h, const ClientActions& client, std::chrono::milliseconds patience,
                std::chrono::milliseconds timeout) {
  const auto start = std::chrono::steady_clock::now();
  int rounds = 0;
  bool terminated = false, client_killed = false;
  std::string step;
  for (;;) {
    if (Set(h.stop)) return Unavailable("kill step " + h.step_name + ": executor stopping");
    const bool late = std::chrono::steady_clock::now() - start > patience;
    step = FindStep(h.job_id, h.step_name);
    const bool client_alive = !Set(h.client_ended);
    if (!step.empty()) {
      (void)RunCommand({"scancel", "--signal=KILL", step});
      if (rounds++ > 0) (void)RunCommand({"scancel", step});
    } else if (client_alive && !late && !terminated) {
      terminated = true;
      client.terminate();
    }
    if (step.empty() && !client_alive) return Status::Ok();
    if (late && !client_killed) {
      client_killed = true;
      client.kill();
    }
    if (std::chrono::steady_clock::now() - start > timeout)
      return DeadlineExceeded("kill step " + h.step_name + " of job " + h.job_id + ": " +
                              (step.empty() ? "srun client" : "step " + step) + " still present after " +
                              std::to_string(timeout.count()) + " ms");
    std::this_thread::sleep_for(kPoll);
  }
}

}  // namespace tandem::backends::slurm
