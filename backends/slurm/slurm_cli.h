// Running Slurm's command-line clients (srun, scancel, squeue, scontrol,
// sbatch) from the Slurm backend (issue #5; backends/slurm/slurm_executor.h).
// The CLI is the portable path: it works whichever libslurm protocol version
// the cluster speaks. Commands run with the daemon's own environment (so
// SLURM_CONF reaches them), stdin from /dev/null, and a bounded wall time.
// These calls block: the executors make them on their worker threads
// (step_control.h, batch_control.h), never on the daemon's io thread. Safe to call from any thread.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "common/status.h"

namespace tandem::backends::slurm {

struct CommandResult {
  int exit_code = -1;  // -1 when killed by a signal (timeout)
  std::string out;
  std::string err;
  bool ok() const { return exit_code == 0; }
};

// Runs argv (argv[0] looked up in PATH) and collects stdout and stderr.
// Errors only when the command could not be started or outlived `timeout`
// (it is then killed).
StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                   std::chrono::milliseconds timeout = std::chrono::seconds(10));

// Whether `name` is an executable in PATH.
bool HaveCommand(const std::string& name);

}  // namespace tandem::backends::slurm
