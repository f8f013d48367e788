// One Slurm batch job through the CLI (issue #5 item 1, submit mode;
// docs/slurm.md "Submit mode"): submit (`sbatch --parsable`), ask its state
// and Slurm's reason (`squeue`, then `scontrol show job` once squeue has
// forgotten it), cancel (`scancel`). The CLI works whichever protocol
// version the controller speaks. All calls block (tens of milliseconds, at
// most their timeout) and are safe from any thread.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace tandem::backends::slurm {

struct BatchState {
  std::string state;   // Slurm's job state: PENDING, RUNNING, COMPLETED, TIMEOUT, PREEMPTED, ...
  std::string reason;  // Slurm's reason (Priority, Resources, TimeLimit, ...; "None" when none)
  bool running() const { return state == "RUNNING"; }
  // Waiting to run (again): pending, configuring, requeued, suspended.
  bool waiting() const;
  // Ended for good (anything neither running nor waiting).
  bool ended() const { return !running() && !waiting(); }
  std::string ToString() const { return state + (reason.empty() || reason == "None" ? "" : " (" + reason + ")"); }
};

// Submits a batch job that holds its allocation until cancelled; `args` are
// sbatch options (sbatch_args.h). Returns the job id.
StatusOr<std::string> SubmitBatch(const std::vector<std::string>& args);

// The job's state. NotFound when Slurm knows no such job (purged after
// MinJobAge); Unavailable when the controller does not answer.
StatusOr<BatchState> QueryBatch(const std::string& job_id);

// Cancels the job and all its steps. Ok when it already ended.
Status CancelBatch(const std::string& job_id);

// The id of this user's latest job named `name` that Slurm still knows
// (squeue --states=all); NotFound when none, Unavailable when squeue fails
// (which proves nothing about whether it exists).
StatusOr<std::string> FindBatchByName(const std::string& name);

}  // namespace tandem::backends::slurm
