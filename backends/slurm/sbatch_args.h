// The job spec's Slurm scheduling options (docs/jobspec.md "Backends",
// backend.kind "slurm"; validated by orchestrator/spec/backend_parser.cc)
// turned into the arguments of the one batch job that submit mode asks for
// per tandem job (issue #5 items 1-2; docs/slurm.md "Submit mode").
//
//   partition, account, qos, time, constraint, reservation, nodelist, exclude
//                       -> --<name>=VALUE (time as --time)
//   nodes               -> --nodes=N
//   gpus_per_node       -> --gres=<gpu>:N (per node)
//   gres                -> --gres=VALUE ("gpu:8", "gpu:h200:8"); wins over gpus_per_node
//   exclusive: true     -> --exclusive
//   sbatch_args         -> appended as given, last (they override)
//
// Without gres/gpus_per_node the batch job asks for the job's device count
// (`--gres=gpu:N`). --ntasks is the number of GPU-owning tasks (such a step
// takes one CPU of the allocation; colocated and CPU-only steps overlap).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tandem::backends::slurm {

struct BatchShape {
  std::string name;    // --job-name (the tandem job id)
  int devices = 0;     // the job's device count
  int tasks = 1;       // --ntasks: GPU-owning steps take one CPU each (at least 1)
  std::string output;  // --output of the batch script ("" = /dev/null)
};

// sbatch arguments (without "sbatch" and the script) for `options`, the
// spec's backend object (its "kind" key is ignored). InvalidArgument for a
// value of the wrong type (the spec parser should have refused it).
StatusOr<std::vector<std::string>> SbatchArgs(const nlohmann::json& options, const BatchShape& shape);

// The GRES name owner steps request: "gpu", or "gpu:h200" for a typed
// `gres` option ("gpu:h200:8").
std::string StepGres(const nlohmann::json& options);

// The spec's srun_args ([] when absent).
std::vector<std::string> SrunArgs(const nlohmann::json& options);

}  // namespace tandem::backends::slurm
