// The libslurm implementation of BatchJobControl (batch_control.h; issue #5
// item 1): slurm_submit_batch_job with the job_desc_msg_t of job_desc.h,
// slurm_load_job for state and reason, slurm_kill_job to cancel. Compiled
// only with TANDEM_HAVE_LIBSLURM (CMake found libslurm-dev with a supported
// SLURM_VERSION_NUMBER); other builds get the stub at the end, which says
// why the library is not used.
//
// Fallbacks to the CLI (logged): a job with sbatch_args (no job_desc field),
// and every call from the first SLURM_PROTOCOL_VERSION_ERROR on (the
// controller speaks a protocol this libslurm does not). libslurm calls are
// serialised by a mutex; they block for at most its MessageTimeout.
#include "backends/slurm/batch_control.h"

#include "common/log.h"

#ifdef TANDEM_HAVE_LIBSLURM
#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>

#include <atomic>
#include <csignal>
#include <mutex>

#include "backends/slurm/job_desc.h"

#if SLURM_VERSION_NUMBER < SLURM_VERSION_NUM(22, 5, 0) || SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(22, 6, 0)
#error "lib_batch_control.cc is written against libslurm 22.05 (job_desc_msg_t fields); CMake should not build it"
#endif

// Exported by libslurm 22.05 (slurm_protocol_defs.c) without a public declaration.
extern "C" char* slurm_job_state_string(uint32_t state);
extern "C" const char* slurm_job_reason_string(int reason);

namespace tandem::backends::slurm {
namespace {

class LibBatchControl final : public BatchJobControl {
 public:
  std::string_view name() const override { return "lib"; }

  StatusOr<std::string> Submit(const nlohmann::json& options, const BatchShape& shape) override {
    if (cli_only_.load()) return cli_->Submit(options, shape);
    if (NeedsSbatch(options)) {
      log::Info("slurm", "tandem_job={} has sbatch_args (no libslurm field): submitting with sbatch", shape.name);
      return cli_->Submit(options, shape);
    }
    TANDEM_ASSIGN_OR_RETURN(JobDesc d, JobDescFor(options, shape), "slurm_submit_batch_job");
    job_desc_msg_t msg;
    slurm_init_job_desc_msg(&msg);
    TANDEM_RETURN_IF_ERROR(FillJobDescMsg(d, &msg), "slurm_submit_batch_job");
    submit_response_msg_t* resp = nullptr;
    int rc, err = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      rc = slurm_submit_batch_job(&msg, &resp);
      if (rc != SLURM_SUCCESS) err = slurm_get_errno();
    }
    if (rc != SLURM_SUCCESS) {
      if (ProtocolMismatch(err)) return cli_->Submit(options, shape);
      return Unavailable(std::string("slurm_submit_batch_job: ") + slurm_strerror(err));
    }
    const std::string id = std::to_string(resp->job_id);
    slurm_free_submit_response_response_msg(resp);
    return id;
  }

  StatusOr<BatchState> Query(const std::string& job_id) override {
    if (cli_only_.load()) return cli_->Query(job_id);
    uint32_t id = 0;
    try {
      id = static_cast<uint32_t>(std::stoul(job_id));
    } catch (const std::exception&) {
      return InvalidArgument("slurm_load_job: bad job id \"" + job_id + "\"");
    }
    BatchState st;
    int rc, err = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_info_msg_t* info = nullptr;
      rc = slurm_load_job(&info, id, SHOW_ALL);
      if (rc != SLURM_SUCCESS) {
        err = slurm_get_errno();
      } else if (info && info->record_count > 0) {
        const slurm_job_info_t& j = info->job_array[0];
        // A job being torn down reads COMPLETING; its base state says why
        // (TIMEOUT, CANCELLED, PREEMPTED, NODE_FAIL, ...).
        const uint32_t state = (j.job_state & JOB_COMPLETING) ? (j.job_state & JOB_STATE_BASE) : j.job_state;
        st.state = slurm_job_state_string(state);
        st.reason = slurm_job_reason_string(static_cast<int>(j.state_reason));
      }
      if (info) slurm_free_job_info_msg(info);
    }
    if (rc != SLURM_SUCCESS) {
      if (err == ESLURM_INVALID_JOB_ID) return NotFound("slurm job " + job_id + ": unknown");
      if (ProtocolMismatch(err)) return cli_->Query(job_id);
      return Unavailable("slurm_load_job " + job_id + ": " + slurm_strerror(err));
    }
    if (st.state.empty()) return NotFound("slurm job " + job_id + ": unknown");
    return st;
  }

  Status Cancel(const std::string& job_id) override {
    if (cli_only_.load()) return cli_->Cancel(job_id);
    uint32_t id = 0;
    try {
      id = static_cast<uint32_t>(std::stoul(job_id));
    } catch (const std::exception&) {
      return InvalidArgument("slurm_kill_job: bad job id \"" + job_id + "\"");
    }
    int rc, err = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      rc = slurm_kill_job(id, SIGKILL, 0);
      if (rc != SLURM_SUCCESS) err = slurm_get_errno();
    }
    if (rc == SLURM_SUCCESS || err == ESLURM_ALREADY_DONE || err == ESLURM_INVALID_JOB_ID) return Status::Ok();
    if (ProtocolMismatch(err)) return cli_->Cancel(job_id);
    return Unavailable("slurm_kill_job " + job_id + ": " + slurm_strerror(err));
  }

 private:
  // True (and the CLI from now on) when `err` says the controller speaks
  // another protocol version.
  bool ProtocolMismatch(int err) {
    if (err != SLURM_PROTOCOL_VERSION_ERROR) return false;
    if (!cli_only_.exchange(true))
      log::Warn("slurm", "libslurm: {}: using sbatch/squeue/scancel from now on", slurm_strerror(err));
    return true;
  }

  std::mutex mu_;
  std::atomic<bool> cli_only_{false};
  std::unique_ptr<BatchJobControl> cli_ = MakeCliBatchControl();
};

}  // namespace

bool LibslurmBuilt() { return true; }

StatusOr<std::unique_ptr<BatchJobControl>> MakeLibBatchControl() {
  const long runtime = slurm_api_version();
  if (SLURM_VERSION_MAJOR(runtime) != TANDEM_LIBSLURM_API_MAJOR)
    return FailedPrecondition("runtime libslurm API " + std::to_string(SLURM_VERSION_MAJOR(runtime)) +
                              " is not the " + std::to_string(TANDEM_LIBSLURM_API_MAJOR) + " built against");
  slurm_init(nullptr);  // reads SLURM_CONF (or the default slurm.conf)
  log::Info("slurm", "libslurm api={} built with SLURM_VERSION_NUMBER={:#x}", SLURM_VERSION_MAJOR(runtime),
            SLURM_VERSION_NUMBER);
  return std::unique_ptr<BatchJobControl>(new LibBatchControl());
}

}  // namespace tandem::backends::slurm

#else  // !TANDEM_HAVE_LIBSLURM

namespace tandem::backends::slurm {

bool LibslurmBuilt() { return false; }

StatusOr<std::unique_ptr<BatchJobControl>> MakeLibBatchControl() {
  return FailedPrecondition("built without libslurm (libslurm-dev 22.05 not found at configure time)");
}

}  // namespace tandem::backends::slurm

#endif
