// Batch jobs through sbatch/squeue/scontrol/scancel: see batch_job.h.
#include "backends/slurm/batch_job.h"

#include <unistd.h>

#include "backends/slurm/allocation.h"
#include "backends/slurm/slurm_cli.h"

namespace tandem::backends::slurm {
namespace {

std::string Trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

}  // namespace

bool BatchState::waiting() const {
  return state == "PENDING" || state == "CONFIGURING" || state == "REQUEUED" || state == "REQUEUE_HOLD" ||
         state == "REQUEUE_FED" || state == "SUSPENDED" || state == "RESIZING" || state == "SIGNALING" ||
         state == "STAGE_OUT" || state == "RESV_DEL_HOLD";
}

StatusOr<std::string> SubmitBatch(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"sbatch"};
  argv.insert(argv.end(), args.begin(), args.end());
  // The batch script holds the allocation; tandem runs the tasks as steps.
  argv.push_back("--wrap=exec sleep 2147483647");
  TANDEM_ASSIGN_OR_RETURN(CommandResult r, RunCommand(argv, std::chrono::seconds(30)), "sbatch");
  std::string id = Trim(r.out.substr(0, r.out.find_first_of(";\n")));
  if (!r.ok() || id.empty() || id.find_first_not_of("0123456789") != std::string::npos)
    return Unavailable("sbatch: " + Trim(r.err.empty() ? r.out : r.err));
  return id;
}

StatusOr<BatchState> QueryBatch(const std::string& job_id) {
  TANDEM_ASSIGN_OR_RETURN(CommandResult q,
                          RunCommand({"squeue", "--noheader", "--jobs=" + job_id, "--states=all", "--format=%T|%r"}),
                          "squeue " + job_id);
  std::string line = Trim(q.out.substr(0, q.out.find('\n')));
  if (q.ok() && !line.empty()) {
    size_t bar = line.find('|');
    return BatchState{line.substr(0, bar), bar == std::string::npos ? "" : line.substr(bar + 1)};
  }
  TANDEM_ASSIGN_OR_RETURN(CommandResult s, RunCommand({"scontrol", "show", "job", job_id}), "scontrol " + job_id);
  if (!s.ok()) {
    if (s.err.find("Invalid job id") != std::string::npos) return NotFound("slurm job " + job_id + ": unknown");
    return Unavailable("scontrol show job " + job_id + ": " + Trim(s.err));
  }
  BatchState st{ScontrolField(s.out, "JobState"), ScontrolField(s.out, "Reason")};
  if (st.state.empty()) return Unavailable("scontrol show job " + job_id + ": no JobState");
  return st;
}

Status CancelBatch(const std::string& job_id) {
  TANDEM_ASSIGN_OR_RETURN(CommandResult r, RunCommand({"scancel", job_id}), "scancel " + job_id);
  if (!r.ok() && r.err.find("already completing or completed") == std::string::npos &&
      r.err.find("Invalid job id") == std::string::npos)
    return Unavailable("scancel " + job_id + ": " + Trim(r.err));
  return Status::Ok();
}

StatusOr<std::string> FindBatchByName(const std::string& name) {
  TANDEM_ASSIGN_OR_RETURN(CommandResult r,
                          RunCommand({"squeue", "--noheader", "--states=all", "--name=" + name,
                                      "--user=" + std::to_string(::getuid()), "--sort=-i", "--format=%i"}),
                          "squeue --name=" + name);
  if (!r.ok()) return Unavailable("squeue --name=" + name + ": " + Trim(r.err));
  std::string id = Trim(r.out.substr(0, r.out.find('\n')));
  if (id.empty()) return NotFound("no slurm job named " + name);
  return id;
}

}  // namespace tandem::backends::slurm
