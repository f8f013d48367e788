// Finding an srun client by the step it is creating (issue #5 follow-up,
// "re-attach robustness"; docs/slurm.md "Restart"). A daemon killed between
// spawning srun and recording the client's pid (.step.json) leaves an orphaned
// srun client that may still be creating its step. Its identity is known
// before the spawn: the step's name, unique per start (<task>.<random>), is
// in srun's command line (--job-name=<name>), and in the exec shim's in front
// of it. A restarted daemon finds those processes by scanning
// /proc/*/cmdline (the daemon restarts on the host it ran on, as local
// re-attach requires) and signals exactly them: each by pid after checking
// that its start time is the one seen in the scan (a recycled pid is never
// signalled).
#pragma once

#include <string>
#include <vector>

#include "backends/local/proc_table.h"

namespace tandem::backends::slurm {

// The argument that names the step in srun's command line.
std::string StepNameArg(const std::string& step_name);

// Live (non-zombie) processes whose command line holds the argument
// StepNameArg(step_name): the srun client of that step and its exec shim.
// Processes whose cmdline cannot be read are skipped. Blocks briefly (one
// read per process): call from a worker thread.
std::vector<local::ProcStat> FindSrunClients(const std::string& step_name);

// Sends `sig` to each process still alive with the same start time.
// Returns how many were signalled.
int SignalProcesses(const std::vector<local::ProcStat>& procs, int sig);

}  // namespace tandem::backends::slurm
