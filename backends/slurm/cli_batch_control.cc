// The CLI implementation of BatchJobControl (batch_control.h): the spec's
// options as sbatch arguments (sbatch_args.h) and the sbatch/squeue/scontrol/
// scancel calls of batch_job.h. Also the factory that picks an implementation.
#include <utility>

#include "backends/slurm/batch_control.h"
#include "common/log.h"

namespace tandem::backends::slurm {
namespace {

class CliBatchControl final : public BatchJobControl {
 public:
  std::string_view name() const override { return "cli"; }
  StatusOr<std::string> Submit(const nlohmann::json& options, const BatchShape& shape) override {
    TANDEM_ASSIGN_OR_RETURN(auto args, SbatchArgs(options, shape), "sbatch arguments");
    return SubmitBatch(args);
  }
  StatusOr<BatchState> Query(const std::string& job_id) override { return QueryBatch(job_id); }
  Status Cancel(const std::string& job_id) override { return CancelBatch(job_id); }
};

}  // namespace

std::unique_ptr<BatchJobControl> MakeCliBatchControl() { return std::make_unique<CliBatchControl>(); }

StatusOr<std::unique_ptr<BatchJobControl>> MakeBatchJobControl(std::string_view mode) {
  if (mode == "cli") return MakeCliBatchControl();
  if (mode == "lib") return MakeLibBatchControl();
  if (mode != "auto") return InvalidArgument("slurm api \"" + std::string(mode) + "\": expected auto, lib or cli");
  auto lib = MakeLibBatchControl();
  if (lib.ok()) return std::move(lib).value();
  log::Info("slurm", "libslurm not used ({}): batch jobs through sbatch/squeue/scancel", lib.status().ToString());
  return MakeCliBatchControl();
}

}  // namespace tandem::backends::slurm
