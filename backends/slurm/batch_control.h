// How submit mode talks to Slurm about its batch jobs (issue #5 item 1;
// docs/slurm.md "Submit mode", "libslurm or the CLI"): one small interface,
// two implementations, chosen once at daemon start (`tandemd --slurm-api
// auto|lib|cli`, TANDEM_SLURM_API) and logged:
//
//   cli  (cli_batch_control.cc)  sbatch --parsable / squeue / scontrol /
//        scancel (batch_job.h). Works whichever protocol version the
//        controller speaks; always built.
//   lib  (lib_batch_control.cc)  libslurm: slurm_submit_batch_job with a
//        job_desc_msg_t (job_desc.h), slurm_load_job, slurm_kill_job. Built
//        only when CMake finds libslurm-dev with a supported
//        SLURM_VERSION_NUMBER (22.05.x; TANDEM_HAVE_LIBSLURM). Falls back to
//        the CLI for a job whose options have no job_desc field
//        (`sbatch_args`), and for good once the controller answers
//        SLURM_PROTOCOL_VERSION_ERROR; each fallback is logged.
//
// Every call blocks (tens of milliseconds; at most the CLI timeout or
// libslurm's MessageTimeout) and is safe from any thread: the submit
// executor makes them on its worker pool, never on the daemon's io thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "backends/slurm/batch_job.h"
#include "backends/slurm/sbatch_args.h"
#include "common/status.h"

namespace tandem::backends::slurm {

class BatchJobControl {
 public:
  virtual ~BatchJobControl() = default;
  // "lib" or "cli": what the daemon logs at start.
  virtual std::string_view name() const = 0;
  // Submits the batch job that holds the allocation of one tandem job
  // (`options`: the spec's backend object, sbatch_args.h; `shape`: name,
  // devices, tasks, output). Returns Slurm's job id. Errors carry Slurm's
  // words (sbatch's stderr or slurm_strerror) and mean nothing was submitted.
  virtual StatusOr<std::string> Submit(const nlohmann::json& options, const BatchShape& shape) = 0;
  // The job's state and Slurm's reason. NotFound when Slurm no longer knows
  // the job (purged after MinJobAge); Unavailable when it does not answer.
  virtual StatusOr<BatchState> Query(const std::string& job_id) = 0;
  // Cancels the job and all its steps. Ok when it already ended or is unknown.
  virtual Status Cancel(const std::string& job_id) = 0;
};

// The CLI implementation (always available).
std::unique_ptr<BatchJobControl> MakeCliBatchControl();

// Whether this build has the libslurm implementation.
bool LibslurmBuilt();

// The libslurm implementation. FailedPrecondition when it was not built or
// the runtime libslurm's slurm_api_version() is not the one built against.
StatusOr<std::unique_ptr<BatchJobControl>> MakeLibBatchControl();

// `mode`: "lib" (libslurm or an error), "cli", or "auto" (libslurm when built
// and its runtime version matches, else the CLI; the reason is logged).
StatusOr<std::unique_ptr<BatchJobControl>> MakeBatchJobControl(std::string_view mode);

}  // namespace tandem::backends::slurm
