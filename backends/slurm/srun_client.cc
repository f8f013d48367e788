// Orphaned srun clients found by their step's name: see srun_client.h.
#include "backends/slurm/srun_client.h"

#include <signal.h>

namespace tandem::backends::slurm {

std::string StepNameArg(const std::string& step_name) { return "--job-name=" + step_name; }

std::vector<local::ProcStat> FindSrunClients(const std::string& step_name) {
  return local::FindProcessesWithArg(StepNameArg(step_name));
}

int SignalProcesses(const std::vector<local::ProcStat>& procs, int sig) {
  int n = 0;
  for (const auto& p : procs) {
    auto now = local::ReadProcStat(p.pid);
    if (!now || now->dead() || now->start_time != p.start_time) continue;
    if (::kill(p.pid, sig) == 0) ++n;
  }
  return n;
}

}  // namespace tandem::backends::slurm
