// Finding, signalling and cancelling one job step through squeue/scancel
// (issue #5 item 3, cancel; backends/slurm/slurm_executor.h, "Signal/Kill").
// These calls block for tens of milliseconds to seconds, so the Slurm
// executor runs them on its worker threads, never on the daemon's io thread
// (executor.h, "Threading"). They touch no executor state: what they need to
// know about the srun client (has it ended?) is an atomic flag the io thread
// sets, and what they need done to it (SIGTERM, kill) is a callback that the
// caller posts to the io thread. Every loop is bounded by a deadline and
// stops early when `stop` is set (the executor is being destroyed).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <string>

#include "common/status.h"

namespace tandem::backends::slurm {

// "J.S" of the live step named `step_name` in job `job_id`; "" when there is
// none (or squeue could not answer).
std::string FindStep(const std::string& job_id, const std::string& step_name);

// The same, telling "no such step" ("", also when Slurm no longer knows the
// job) from "squeue did not answer" (an error): a caller that concludes
// from an absent step (the step never started) must not conclude it from a
// failed squeue.
StatusOr<std::string> LookupStep(const std::string& job_id, const std::string& step_name);

struct StepHandle {
  std::string job_id;
  std::string step_name;
  const std::atomic<bool>* client_ended = nullptr;  // the srun client exited
  const std::atomic<bool>* stop = nullptr;          // give up now
};

// Sends `sig` to the step's processes (scancel --signal). Right after Start
// the step may not exist yet: waits for it while its srun client lives, at
// most `wait`. Ok when the step ended or never appeared.
Status SignalStep(const StepHandle& h, int sig, std::chrono::milliseconds wait);

// What KillStep asks the io thread to do with the srun client.
struct ClientActions {
  std::function<void()> terminate;  // SIGTERM: srun cancels the step it is creating
  std::function<void()> kill;       // SIGKILL the client and everything with its marker
};

// SIGKILLs the step (scancel --signal=KILL, then scancel from the second
// round: a step caught mid-launch ignores signals); while no step exists yet
// asks the client to terminate (a SIGKILLed srun would orphan the step it is
// creating); after `patience` kills the client outright. Returns Ok once
// neither step nor client remains, DeadlineExceeded after `timeout`.
Status KillStep(const StepHandle& h, const ClientActions& client, std::chrono::milliseconds patience,
                std::chrono::milliseconds timeout);

}  // namespace tandem::backends::slurm
