// The spec's Slurm scheduling options as the fields of libslurm's
// job_desc_msg_t (issue #5 item 1; docs/slurm.md "libslurm or the CLI"):
// the same mapping sbatch_args.h makes onto sbatch arguments, field by field.
//
//   partition, account, qos, reservation -> the field of the same name
//   time         -> time_limit (minutes; Slurm's formats "30", "1:00:00",
//                   "2-00:00:00", through libslurm's slurm_time_str2mins)
//   constraint   -> features          nodelist -> req_nodes
//   exclude      -> exc_nodes         nodes    -> min_nodes = max_nodes
//   gres / gpus_per_node / the job's device count
//                -> tres_per_node "gres:gpu:N" (what sbatch --gres sends)
//   exclusive    -> shared = JOB_SHARED_NONE
//   shape        -> name, num_tasks = min_cpus, std_out, the holding script
//   sbatch_args  -> no field: NeedsSbatch is true and submit
//                   mode uses sbatch for that job.
//
// JobDescFor is pure (no libslurm needed, unit-tested everywhere);
// FillJobDescMsg exists only in builds with libslurm (TANDEM_HAVE_LIBSLURM).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "backends/slurm/sbatch_args.h"
#include "common/status.h"

namespace tandem::backends::slurm {

struct JobDesc {
  std::string name, partition, account, qos, reservation;
  std::string time;           // Slurm's time string, "" = the partition's default
  std::string features;       // constraint
  std::string req_nodes;      // nodelist
  std::string exc_nodes;      // exclude
  std::string tres_per_node;  // "gres:gpu:2", "" = none
  std::string std_out;        // the batch script's output ("/dev/null" when the shape has none)
  std::string script;         // holds the allocation: #!/bin/sh + exec sleep
  int nodes = 0;              // 0 = unset
  int num_tasks = 1;
  bool exclusive = false;
};

// Whether the options need sbatch itself (a non-empty sbatch_args).
bool NeedsSbatch(const nlohmann::json& options);

// InvalidArgument for a value of the wrong type; FailedPrecondition when
// NeedsSbatch(options).
StatusOr<JobDesc> JobDescFor(const nlohmann::json& options, const BatchShape& shape);

}  // namespace tandem::backends::slurm

#ifdef TANDEM_HAVE_LIBSLURM
struct job_descriptor;  // libslurm's job_desc_msg_t

namespace tandem::backends::slurm {
// Fills `msg` (already slurm_init_job_desc_msg'ed) from `d`; the char*
// fields point into `d`, which must outlive `msg`'s use. The environment is
// the daemon's own (as sbatch sends its own), user/group ids and work_dir
// the daemon's. InvalidArgument for a time Slurm cannot parse.
Status FillJobDescMsg(const JobDesc& d, job_descriptor* msg);
}  // namespace tandem::backends::slurm
#endif
