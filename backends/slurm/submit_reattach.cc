// SlurmSubmitExecutor after a daemon restart (docs/slurm.md "Restart";
// submit_executor.h "Restart"): re-attaching a task to its batch job, its
// step (.step.json), a step known only by its intent (step_intent.h), or
// queueing it again. No squeue on the io thread: lookups run on workers.
#include <signal.h>

#include <boost/asio/post.hpp>

#include "backends/slurm/batch_job.h"
#include "backends/slurm/submit_executor.h"
#include "backends/slurm/submit_records.h"
#include "common/json_field.h"
#include "common/log.h"
#include "common/task_file.h"

namespace tandem::backends {

namespace fs = std::filesystem;
using namespace submit;  // NOLINT: the records of submit_records.h

// The batch job of a tandem job whose task refs carry no id (the daemon
// died while it was being submitted), as far as it is known without asking
// Slurm: this daemon's map, else the record OnSubmitted wrote.
std::string SlurmSubmitExecutor::KnownBatchOf(const std::string& tandem_job) {
  if (auto it = batch_of_job_.find(tandem_job); it != batch_of_job_.end()) return it->second;
  if (auto info = options_.job_info(tandem_job); info.ok() && !info->run_dir.empty())
    if (auto rec = ReadTaskJson(info->run_dir / "slurm-batch.json"); rec && StringField(*rec, "tandem_job") == tandem_job)
      return StringField(*rec, "job_id");
  return "";
}

Status SlurmSubmitExecutor::Reattach(const TaskRef& ref) {
  TANDEM_ASSIGN_OR_RETURN(SubmitRef r, ParseRef(ref), "reattach");
  if (pending_.count(ref.task_id)) return Status::Ok();
  if (!r.batch_id.empty() || submitting_.count(r.tandem_job)) return ReattachTo(ref, r.batch_id);
  if (std::string known = KnownBatchOf(r.tandem_job); !known.empty()) return ReattachTo(ref, known);
  // Only Slurm knows (squeue --name): ask on a worker; the task counts as
  // alive meanwhile, and a Signal or Kill is applied once it is re-attached.
  pending_[ref.task_id] = Pending{ref, "", r.exit_path};
  FindBatchThenReattach(ref.task_id, 0);
  return Status::Ok();
}

void SlurmSubmitExecutor::FindBatchThenReattach(const std::string& task_id, int attempt) {
  auto it = pending_.find(task_id);
  if (it == pending_.end() || stop_->load()) return;
  const std::string tandem_job = StringField(it->second.ref.data, "tandem_job");
  boost::asio::post(*workers_, [this, weak = std::weak_ptr<int>(alive_), stop = stop_, task_id, tandem_job, attempt] {
    if (stop->load()) return;
    auto found = slurm::FindBatchByName(tandem_job);
    if (!found.ok() && found.status().code() == StatusCode::kNotFound) found = std::string();  // never submitted
    boost::asio::post(io_, [this, weak, task_id, attempt, found = std::move(found)] {
      if (!weak.lock()) return;
      auto p = pending_.find(task_id);
      if (p == pending_.end()) return;
      if (!found.ok() && attempt < 30) {
        // Not knowing is not "never submitted": a second batch job must not follow. Ask again.
        log::Warn("slurm", "task={}: is its batch job submitted? {} (asking again)", task_id, found.status().ToString());
        auto timer = std::make_shared<boost::asio::steady_timer>(io_, std::chrono::seconds(1));
        timer->async_wait([this, weak, timer, task_id, attempt](const boost::system::error_code& ec) {
          if (!ec && weak.lock()) FindBatchThenReattach(task_id, attempt + 1);
        });
        return;
      }
      Pending pend = std::move(p->second);
      pending_.erase(p);
      if (!found.ok()) {
        TaskExit x = Ended("slurm: could not learn whether the batch job of " + pend.ref.task_id +
                           " was submitted: " + found.status().ToString());
        x.status_known = false;
        PostExit(task_id, x);
        return;
      }
      if (Status st = ReattachTo(pend.ref, *found); !st.ok()) {
        TaskExit x = Ended("slurm: could not re-attach: " + st.ToString());
        x.status_known = false;
        PostExit(task_id, x);
        return;
      }
      if (pend.killed) (void)Kill(pend.ref);
      else if (pend.signal) (void)Signal(pend.ref, pend.signal);
    });
  });
}

Status SlurmSubmitExecutor::ReattachTo(const TaskRef& ref, const std::string& batch_id) {
  TANDEM_ASSIGN_OR_RETURN(SubmitRef r, ParseRef(ref), "reattach");
  r.batch_id = batch_id;
  if (r.batch_id.empty()) {
    // Never submitted (the daemon died before sbatch answered): submit now.
    auto launch = ReadTaskJson(Sibling(r.exit_path, ".launch.json"));
    if (!launch) {
      PostExit(ref.task_id, Ended("no launch record survived the daemon restart"));
      return Status::Ok();
    }
    TANDEM_ASSIGN_OR_RETURN(LaunchRequest req, RequestFromJson(*launch), "reattach " + ref.task_id);
    if (!submitting_.count(r.tandem_job)) TANDEM_RETURN_IF_ERROR(SubmitAsync(r.tandem_job), "reattach " + ref.task_id);
    submitting_[r.tandem_job].queued.push_back(req);
    log::Info("slurm", "reattached task={} (its batch job was never submitted: submitting)", ref.task_id);
    return Status::Ok();
  }
  TANDEM_ASSIGN_OR_RETURN(Batch* b, Adopt(r.batch_id, r.tandem_job), "reattach " + ref.task_id);
  if (b->launched.count(ref.task_id)) return Status::Ok();
  if (auto step = ReadTaskJson(Sibling(r.exit_path, ".step.json"))) {
    TANDEM_ASSIGN_OR_RETURN(TaskRef inner, TaskRef::FromJson(*step), "reattach " + ref.task_id);
    TANDEM_RETURN_IF_ERROR(b->steps->Reattach(inner), "reattach " + ref.task_id);
    b->launched[ref.task_id] = inner;
    log::Info("slurm", "reattached task={} batch job={}", ref.task_id, b->id);
    return Status::Ok();
  }
  if (auto intent = ReadTaskJson(Sibling(r.exit_path, ".step-intent.json")); intent && StringField(*intent, "job_id") == b->id) {
    // Killed between spawning srun and writing .step.json: the step may run,
    // be being created, or never have started. Found out on workers.
    slurm::StepIntent in{b->id, StringField(*intent, "step_name"), IntField(*intent, "at_ms", 0)};
    pending_[ref.task_id] = Pending{ref, b->id, r.exit_path};
    // Its GPUs may be held (or being claimed) by that step: steps started
    // meanwhile share them instead of requesting their GRES again.
    std::set<int> devices;
    if (intent->contains("devices") && (*intent)["devices"].is_array())
      for (const auto& d : (*intent)["devices"])
        if (d.is_number_integer()) devices.insert(d.get<int>());
    b->steps->HoldGres(ref.task_id, devices);
    resolver_->Resolve(ref.task_id, in, r.exit_path);
    return Status::Ok();
  }
  QueueAgain(ref.task_id, b->id, r.exit_path);
  return Status::Ok();
}

void SlurmSubmitExecutor::OnIntentResolved(const std::string& task_id, const slurm::IntentResolver::Outcome& out) {
  auto node = pending_.extract(task_id);
  if (node.empty()) return;
  const Pending& p = node.mapped();
  const std::string& why = out.decision.why;
  if (out.decision.verdict != slurm::IntentVerdict::kAdopt)
    if (auto b = batches_.find(p.batch_id); b != batches_.end()) b->second->steps->ReleaseGres(task_id);
  switch (out.decision.verdict) {
    case slurm::IntentVerdict::kAdopt: {
      fs::path stderr_path;
      if (auto launch = ReadTaskJson(Sibling(p.exit_path, ".launch.json")))
        stderr_path = StringField(*launch, "stderr_path");
      adopted_->Adopt(task_id, p.batch_id, out.intent.step_name, p.exit_path, stderr_path, out.intent.at_ms);
      if (p.killed) adopted_->Kill(task_id);
      else if (p.signal) adopted_->Signal(task_id, p.signal);
      return;
    }
    case slurm::IntentVerdict::kEndedUnknown: {
      TaskExit x = Ended("slurm: step " + out.intent.step_name + ": " + why);
      x.exit_code = -1;
      x.status_known = false;
      PostExit(task_id, x);
      return;
    }
    case slurm::IntentVerdict::kNeverStarted:
      if (p.killed || p.signal) {
        PostExit(task_id, Ended("slurm: signalled before its step started (" + why + ")", p.killed ? SIGKILL : p.signal));
        return;
      }
      QueueAgain(task_id, p.batch_id, p.exit_path);
      return;
    case slurm::IntentVerdict::kWait:
      return;  // not an outcome
  }
}

// A task that never started: it starts when its batch job runs.
void SlurmSubmitExecutor::QueueAgain(const std::string& task_id, const std::string& batch_id,
                                     const fs::path& exit_path) {
  auto launch = ReadTaskJson(Sibling(exit_path, ".launch.json"));
  auto req = launch ? RequestFromJson(*launch) : StatusOr<LaunchRequest>(NotFound("no launch record"));
  if (!req.ok()) {
    TaskExit x = Ended("no launch record survived the daemon restart: " + req.status().ToString());
    x.status_known = false;
    PostExit(task_id, x);
    return;
  }
  auto it = batches_.find(batch_id);
  if (it == batches_.end() || it->second->cancelled ||
      (it->second->state.ended() && !it->second->state.state.empty())) {
    PostExit(task_id, Ended("slurm: batch job " + batch_id + " ended before the task started" +
                            (it == batches_.end() ? "" : ": " + it->second->state.ToString())));
    return;
  }
  it->second->queued.push_back(*req);
  log::Info("slurm", "reattached task={} batch job={} (not started yet)", task_id, batch_id);
}

}  // namespace tandem::backends
