// SlurmSubmitExecutor: see submit_executor.h.
#include "backends/slurm/submit_executor.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>

#include <fstream>

#include <boost/asio/post.hpp>

#include "backends/slurm/allocation.h"
#include "backends/slurm/hostlist.h"
#include "backends/slurm/sbatch_args.h"
#include "backends/slurm/slurm_cli.h"
#include "backends/slurm/step_placement.h"
#include "backends/slurm/submit_records.h"
#include "backends/task_env.h"
#include "common/log.h"

namespace tandem::backends {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace submit;  // NOLINT: the records of submit_records.h

// Logical ids in CUDA_VISIBLE_DEVICES mapped onto the allocation's GPUs.
void MapDevices(LaunchRequest& r, const std::vector<int>& gpus) {
  const std::string key = "CUDA_VISIBLE_DEVICES=";
  for (auto& e : r.env) {
    if (e.compare(0, key.size(), key) != 0) continue;
    auto ids = slurm::ParseIndexList(e.substr(key.size()));
    if (!ids.ok() || ids->empty()) return;
    std::string out;
    for (int l : *ids) {
      if (l < 0 || static_cast<size_t>(l) >= gpus.size()) return;  // leave as is
      out += (out.empty() ? "" : ",") + std::to_string(gpus[static_cast<size_t>(l)]);
    }
    e = key + out;
    return;
  }
}

}  // namespace

StatusOr<std::unique_ptr<SlurmSubmitExecutor>> SlurmSubmitExecutor::Create(boost::asio::io_context& io,
                                                                           ExitCallback on_exit,
                                                                           SlurmSubmitOptions options) {
  if (!options.job_info) return InvalidArgument("slurm submit mode: no job_info");
  for (const char* cmd : {"sbatch", "srun", "squeue", "scancel", "scontrol"})
    if (!slurm::HaveCommand(cmd))
      return FailedPrecondition(std::string("slurm submit mode: ") + cmd + " is not in PATH");
  if (!options.control) options.control = slurm::MakeCliBatchControl();
  // Test-only: a short wait for a step still being created after a restart.
  if (const char* w = std::getenv("TANDEM_TEST_SLURM_STEP_CREATE_WAIT_MS"); w && std::atoi(w) > 0)
    options.step_create_wait = std::chrono::milliseconds(std::atoi(w));
  return std::unique_ptr<SlurmSubmitExecutor>(new SlurmSubmitExecutor(io, std::move(on_exit), std::move(options)));
}

SlurmSubmitExecutor::SlurmSubmitExecutor(boost::asio::io_context& io, ExitCallback on_exit,
                                         SlurmSubmitOptions options)
    : io_(io),
      on_exit_(std::move(on_exit)),
      options_(std::move(options)),
      workers_(std::make_unique<boost::asio::thread_pool>(2)),
      adopted_(std::make_unique<slurm::AdoptedSteps>(
          io, *workers_,
          [this](const std::string& task, const std::string& batch_id, const TaskExit& x) {
            OnStepExit(batch_id, task, x);
          },
          options_.poll)),
      resolver_(std::make_unique<slurm::IntentResolver>(
          io, *workers_,
          [this](const std::string& task, const slurm::IntentResolver::Outcome& out) { OnIntentResolved(task, out); },
          options_.step_create_wait, std::chrono::milliseconds(250), std::chrono::seconds(3))) {}

SlurmSubmitExecutor::~SlurmSubmitExecutor() {
  // Stops supervising: batch jobs and steps keep running for the next daemon.
  stop_->store(true);
  alive_.reset();
  workers_->join();
  batches_.clear();
}

std::string SlurmSubmitExecutor::BatchJobOf(const std::string& tandem_job) const {
  auto it = batch_of_job_.find(tandem_job);
  return it == batch_of_job_.end() ? "" : it->second;
}

StatusOr<SlurmSubmitExecutor::Batch*> SlurmSubmitExecutor::Adopt(const std::string& batch_id,
                                                                  const std::string& tandem_job) {
  if (auto it = batches_.find(batch_id); it != batches_.end()) return it->second.get();
  SlurmJobInfo info;
  if (auto got = options_.job_info(tandem_job); got.ok()) info = *got;
  SlurmExecutorOptions so;
  so.job_id = batch_id;
  so.exec_shim = options_.exec_shim;
  so.gres = slurm::StepGres(info.options);
  so.srun_args = slurm::SrunArgs(info.options);
  so.kill_timeout = options_.kill_timeout;
  TANDEM_ASSIGN_OR_RETURN(
      auto steps,
      SlurmExecutor::Create(io_, [this, batch_id](const std::string& task, const TaskExit& x) {
        OnStepExit(batch_id, task, x);
      }, so),
      "slurm job " + batch_id);
  auto b = std::make_unique<Batch>();
  b->id = batch_id;
  b->tandem_job = tandem_job;
  b->steps = std::move(steps);
  b->devices = info.devices;
  b->timer = std::make_unique<boost::asio::steady_timer>(io_);
  Batch* raw = b.get();
  batches_[batch_id] = std::move(b);
  batch_of_job_[tandem_job] = batch_id;
  Poll(batch_id);
  return raw;
}

StatusOr<TaskRef> SlurmSubmitExecutor::Start(const LaunchRequest& req) {
  if (req.argv.empty() || req.argv[0].empty())
    return InvalidArgument("start task " + req.task_id + ": empty command");
  Batch* b = nullptr;
  if (auto it = batch_of_job_.find(req.job_id); it != batch_of_job_.end() && !submitting_.count(req.job_id)) {
    Batch* known = batches_[it->second].get();
    if (!known->cancelled && !(known->state.ended() && !known->state.state.empty())) b = known;
  }
  const fs::path exit_path = req.exit_path.empty() ? req.exit_path : fs::absolute(req.exit_path);
  LaunchRequest r = req;
  r.exit_path = exit_path;
  std::error_code ec;
  fs::remove(Sibling(exit_path, ".step.json"), ec);
  fs::remove(Sibling(exit_path, ".step-intent.json"), ec);
  // The launch record first: without it a restarted daemon cannot start a
  // task that was still queued. Nothing is submitted when it cannot be written.
  TANDEM_RETURN_IF_ERROR(WriteJson(Sibling(exit_path, ".launch.json"), RequestToJson(r)),
                         "start task " + req.task_id + ": launch record");
  if (!b && !submitting_.count(req.job_id)) TANDEM_RETURN_IF_ERROR(SubmitAsync(req.job_id), "slurm submit " + req.job_id);
  if (!b) submitting_[req.job_id].queued.push_back(r);
  else if (b->state.running() && b->queued.empty() && (b->devices == 0 || !b->alloc.gpus.empty())) Launch(*b, r);
  else b->queued.push_back(r);
  TaskRef ref;
  ref.backend = "slurm";
  ref.task_id = req.task_id;
  ref.data = {{"mode", "submit"}, {"job_id", b ? b->id : ""}, {"tandem_job", req.job_id},
              {"exit_path", exit_path.string()}};
  return ref;
}

Status SlurmSubmitExecutor::SubmitAsync(const std::string& tandem_job) {
  TANDEM_ASSIGN_OR_RETURN(SlurmJobInfo info, options_.job_info(tandem_job), "job info");
  slurm::BatchShape shape{tandem_job, info.devices, info.tasks,
                          info.run_dir.empty() ? "" : (info.run_dir / "slurm-batch.out").string()};
  submitting_[tandem_job].run_dir = info.run_dir;
  boost::asio::post(*workers_, [this, weak = std::weak_ptr<int>(alive_), stop = stop_, control = options_.control,
                                tandem_job, options = info.options, shape] {
    if (stop->load()) return;
    StatusOr<std::string> id = control->Submit(options, shape);
    boost::asio::post(io_, [this, weak, tandem_job, id = std::move(id)]() mutable {
      if (weak.lock()) OnSubmitted(tandem_job, std::move(id));
    });
  });
  return Status::Ok();
}

void SlurmSubmitExecutor::OnSubmitted(const std::string& tandem_job, StatusOr<std::string> id) {
  auto node = submitting_.extract(tandem_job);
  if (node.empty()) return;
  Submitting& sub = node.mapped();
  if (!id.ok()) {
    log::Error("slurm", "submit tandem_job={} api={}: {}", tandem_job, options_.control->name(), id.status().ToString());
    for (const auto& r : sub.queued)
      PostExit(r.task_id, Ended("slurm submit " + tandem_job + ": " + id.status().ToString()));
    return;
  }
  log::Info("slurm", "batch submitted job={} tandem_job={} api={}", *id, tandem_job, options_.control->name());
  // Fault point (fault_injection.h; submit_test.sh lost-submit): the daemon
  // dies before it records the batch job anywhere.
  if (options_.faults) options_.faults->CrashIfArmed("slurm.after_submit", "before recording batch job=" + *id);
  // Without this record a restarted daemon still finds the batch job by its
  // name (squeue on a worker, submit_reattach.cc): slower, not lost.
  if (!sub.run_dir.empty())
    if (Status st = WriteJson(sub.run_dir / "slurm-batch.json", {{"job_id", *id}, {"tandem_job", tandem_job}});
        !st.ok())
      log::Error("slurm", "batch job={} tandem_job={}: not recorded in the run dir (a restart finds it by name): {}",
                 *id, tandem_job, st.ToString());
  auto b = Adopt(*id, tandem_job);
  if (!b.ok()) {
    for (const auto& r : sub.queued) PostExit(r.task_id, Ended("slurm submit " + tandem_job + ": " + b.status().ToString()));
    return;
  }
  for (auto& r : sub.queued) (*b)->queued.push_back(std::move(r));
  if (sub.ended) JobEnded(tandem_job);
}

void SlurmSubmitExecutor::Launch(Batch& b, const LaunchRequest& req) {
  LaunchRequest r = req;
  if (b.alloc.nodes.size() > 1) {
    // Several nodes: the task's node and that node's GPUs (step_placement.h).
    std::vector<int> logical;
    for (const auto& e : r.env)
      if (e.rfind("CUDA_VISIBLE_DEVICES=", 0) == 0)
        if (auto ids = slurm::ParseIndexList(e.substr(21)); ids.ok()) logical = *ids;
    auto place = slurm::PlaceStep(b.alloc, logical);
    if (!place.ok()) {
      PostExit(req.task_id, Ended("slurm: cannot place the task on batch job " + b.id + "'s nodes: " +
                                  place.status().ToString()));
      return;
    }
    std::string cvd;
    for (int g : place->gpus) cvd += (cvd.empty() ? "" : ",") + std::to_string(g);
    for (auto& e : r.env)
      if (e.rfind("CUDA_VISIBLE_DEVICES=", 0) == 0) e = "CUDA_VISIBLE_DEVICES=" + cvd;
    r.env.push_back("TANDEM_NODE=" + place->node);
    log::Debug("slurm", "task={} batch job={} node={} gpus={}", req.task_id, b.id, place->node, cvd);
  } else {
    MapDevices(r, b.alloc.gpus);
  }
  // The intent first: a daemon killed before .step.json is written finds the
  // step by this name on re-attach (adopted_step.h).
  const std::string step_name = SlurmExecutor::NewStepName(req.task_id);
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch()).count();
  std::vector<int> devices;  // the batch job's GPU ids the step runs on
  if (auto ids = slurm::ParseIndexList(EnvValue(r.env, "CUDA_VISIBLE_DEVICES")); ids.ok()) devices = *ids;
  // Without the intent a daemon killed now could neither adopt the step nor
  // know it must not start it again: no intent, no step.
  if (Status st = WriteJson(Sibling(req.exit_path, ".step-intent.json"),
                            {{"job_id", b.id}, {"step_name", step_name}, {"at_ms", now_ms}, {"devices", devices}});
      !st.ok()) {
    PostExit(req.task_id, Ended("slurm: cannot record the step's intent, step not started: " + st.ToString()));
    return;
  }
  auto ref = b.steps->StartNamed(r, step_name);
  // Fault point (fault_injection.h; submit_test.sh crash-window).
  if (options_.faults) options_.faults->CrashIfArmed("slurm.after_step_start", "after starting step=" + step_name);
  if (!ref.ok()) {
    PostExit(req.task_id, Ended("slurm: could not start the step in batch job " + b.id + ": " + ref.status().ToString()));
    return;
  }
  b.launched[req.task_id] = *ref;
  // The intent record still names the step: a restart adopts it by name.
  if (Status st = WriteJson(Sibling(req.exit_path, ".step.json"), ref->ToJson()); !st.ok())
    log::Error("slurm", "task={} step={}: step record not written (a restart adopts it by name): {}", req.task_id,
               step_name, st.ToString());
}

void SlurmSubmitExecutor::Poll(const std::string& batch_id) {
  auto it = batches_.find(batch_id);
  if (it == batches_.end() || it->second->polling || stop_->load()) return;
  it->second->polling = true;
  const bool need_gpus = it->second->alloc.gpus.empty();
  boost::asio::post(*workers_, [this, weak = std::weak_ptr<int>(alive_), batch_id, need_gpus, stop = stop_,
                                control = options_.control] {
    if (stop->load()) return;
    auto st = control->Query(batch_id);
    slurm::Allocation alloc;
    if (st.ok() && st->running() && need_gpus)
      if (auto a = slurm::QueryAllocation(batch_id); a.ok()) alloc = std::move(a).value();
    boost::asio::post(io_, [this, weak, batch_id, st = std::move(st), alloc = std::move(alloc)]() mutable {
      if (weak.lock()) OnState(batch_id, std::move(st), std::move(alloc));
    });
  });
}

void SlurmSubmitExecutor::OnState(const std::string& batch_id, StatusOr<slurm::BatchState> st,
                                  slurm::Allocation alloc) {
  auto it = batches_.find(batch_id);
  if (it == batches_.end()) return;
  Batch& b = *it->second;
  b.polling = false;
  if (!st.ok() && st.status().code() == StatusCode::kNotFound) st = slurm::BatchState{"UNKNOWN", "purged by Slurm"};
  if (st.ok()) {
    if (st->state != b.state.state || st->reason != b.state.reason)
      log::Info("slurm", "batch job={} tandem_job={} state={} reason={}", b.id, b.tandem_job, st->state,
                st->reason.empty() ? "None" : st->reason);
    b.state = *st;
    if (b.state.running()) {
      if (!alloc.gpus.empty() || (b.alloc.gpus.empty() && !alloc.nodes.empty())) b.alloc = std::move(alloc);
      // Right after it starts, scontrol may not list the GPUs yet: tasks
      // wait for them rather than run on unmapped logical ids.
      if (b.devices == 0 || !b.alloc.gpus.empty()) {
        std::deque<LaunchRequest> queued;
        queued.swap(b.queued);
        for (const auto& r : queued) Launch(b, r);
      } else {
        log::Debug("slurm", "batch job={} running, its GPUs not listed yet", b.id);
      }
    } else if (b.state.waiting()) {
      b.alloc = {};  // a requeued job may get other nodes and GPUs
    } else {
      std::deque<LaunchRequest> queued;
      queued.swap(b.queued);
      for (const auto& r : queued)
        PostExit(r.task_id, Ended("slurm: batch job " + b.id + " ended before the task started: " + b.state.ToString()));
      return;  // ended: no more polls
    }
  } else {
    log::Warn("slurm", "batch job={} state unknown: {}", b.id, st.status().ToString());
  }
  if (b.cancelled) return;
  b.timer->expires_after(options_.poll);
  b.timer->async_wait([this, weak = std::weak_ptr<int>(alive_), batch_id](const boost::system::error_code& ec) {
    if (!ec && weak.lock()) Poll(batch_id);
  });
}

void SlurmSubmitExecutor::OnStepExit(const std::string& batch_id, const std::string& task_id, TaskExit exit) {
  auto it = batches_.find(batch_id);
  if (it != batches_.end()) it->second->steps->ReleaseGres(task_id);  // an adopted step's GPUs
  if (it == batches_.end()) {
    on_exit_(task_id, exit);
    return;
  }
  it->second->launched.erase(task_id);
  // The step may have ended because Slurm ended its batch job (time limit,
  // preemption, node failure, an outside scancel): ask Slurm now, on a
  // worker, rather than wait for the next poll. A failed step's detail then
  // says why; a step that exited 0 meanwhile (its command caught SIGTERM and
  // exited cleanly) is interrupted, not succeeded. Slurm marks the job
  // before it signals the steps, so the answer is already the new state.
  boost::asio::post(*workers_, [this, weak = std::weak_ptr<int>(alive_), stop = stop_, control = options_.control,
                                batch_id, task_id, exit]() mutable {
    auto st = stop->load() ? StatusOr<slurm::BatchState>(Unavailable("stopping")) : control->Query(batch_id);
    boost::asio::post(io_, [this, weak, batch_id, task_id, exit, st = std::move(st)]() mutable {
      if (!weak.lock()) return;
      auto b = batches_.find(batch_id);
      const slurm::BatchState* s = st.ok() ? &*st : (b != batches_.end() ? &b->second->state : nullptr);
      if (s && !s->state.empty() && !s->running()) {
        const std::string why = "slurm batch job " + batch_id + " " + s->ToString();
        if (exit.succeeded()) {
          exit.interrupted = true;
          exit.detail = why + " while the step ran; its clean exit does not count as done";
        } else {
          exit.detail += (exit.detail.empty() ? "" : "; ") + why;
        }
      }
      on_exit_(task_id, exit);
    });
  });
}

void SlurmSubmitExecutor::PostExit(const std::string& task_id, TaskExit exit) {
  boost::asio::post(io_, [this, weak = std::weak_ptr<int>(alive_), task_id, exit] {
    if (weak.lock()) on_exit_(task_id, exit);
  });
}

SlurmSubmitExecutor::Batch* SlurmSubmitExecutor::BatchOfTask(const std::string& tandem_job,
                                                              const std::string& batch_id) {
  std::string id = batch_id;
  if (id.empty()) {
    auto j = batch_of_job_.find(tandem_job);
    if (j == batch_of_job_.end()) return nullptr;
    id = j->second;
  }
  auto it = batches_.find(id);
  return it == batches_.end() ? nullptr : it->second.get();
}

Status SlurmSubmitExecutor::Signal(const TaskRef& ref, int sig) {
  TANDEM_ASSIGN_OR_RETURN(SubmitRef r, ParseRef(ref), "signal");
  if (auto p = pending_.find(ref.task_id); p != pending_.end()) {
    if (sig == SIGKILL) return Kill(ref);
    p->second.signal = sig;  // applied once re-attached
    return Status::Ok();
  }
  if (adopted_->Has(ref.task_id)) {
    adopted_->Signal(ref.task_id, sig);
    return Status::Ok();
  }
  if (auto sub = submitting_.find(r.tandem_job); sub != submitting_.end() && r.batch_id.empty()) {
    auto& q = sub->second.queued;
    for (auto it = q.begin(); it != q.end(); ++it) {
      if (it->task_id != ref.task_id) continue;
      q.erase(it);
      PostExit(ref.task_id, Ended("signalled before its batch job was submitted", sig));
      break;
    }
    return Status::Ok();
  }
  Batch* b = BatchOfTask(r.tandem_job, r.batch_id);
  if (!b) return Status::Ok();
  if (auto l = b->launched.find(ref.task_id); l != b->launched.end()) return b->steps->Signal(l->second, sig);
  for (auto q = b->queued.begin(); q != b->queued.end(); ++q) {
    if (q->task_id != ref.task_id) continue;
    b->queued.erase(q);
    PostExit(ref.task_id, Ended("signalled before its batch job " + b->id + " started", sig));
    break;
  }
  return Status::Ok();
}

Status SlurmSubmitExecutor::Kill(const TaskRef& ref) {
  TANDEM_ASSIGN_OR_RETURN(SubmitRef r, ParseRef(ref), "kill");
  if (auto p = pending_.find(ref.task_id); p != pending_.end()) {
    p->second.killed = true;  // applied once re-attached; an intent's srun client is stopped now
    if (resolver_->Has(ref.task_id)) resolver_->Cancel(ref.task_id);
    return Status::Ok();
  }
  if (adopted_->Has(ref.task_id)) {
    adopted_->Kill(ref.task_id);
    return Status::Ok();
  }
  Batch* b = BatchOfTask(r.tandem_job, r.batch_id);
  if (!b) return Status::Ok();
  if (auto l = b->launched.find(ref.task_id); l != b->launched.end()) return b->steps->Kill(l->second);
  return Signal(ref, SIGKILL);
}

bool SlurmSubmitExecutor::Alive(const TaskRef& ref) {
  auto r = ParseRef(ref);
  if (!r.ok()) return false;
  if (adopted_->Has(ref.task_id) || pending_.count(ref.task_id)) return true;
  if (auto sub = submitting_.find(r->tandem_job); sub != submitting_.end() && r->batch_id.empty())
    for (const auto& q : sub->second.queued)
      if (q.task_id == ref.task_id) return true;
  Batch* b = BatchOfTask(r->tandem_job, r->batch_id);
  if (!b) return false;
  if (auto l = b->launched.find(ref.task_id); l != b->launched.end()) return b->steps->Alive(l->second);
  for (const auto& q : b->queued)
    if (q.task_id == ref.task_id) return true;
  return false;
}

void SlurmSubmitExecutor::JobEnded(const std::string& job_id) {
  if (auto sub = submitting_.find(job_id); sub != submitting_.end()) {
    sub->second.ended = true;  // cancelled once sbatch answers
    return;
  }
  auto it = batch_of_job_.find(job_id);
  if (it == batch_of_job_.end()) return;
  auto b = batches_.find(it->second);
  if (b == batches_.end() || b->second->cancelled) return;
  b->second->cancelled = true;
  b->second->timer->cancel();
  const std::string id = b->second->id;
  log::Info("slurm", "cancelling batch job={} tandem_job={}", id, job_id);
  boost::asio::post(*workers_, [id, control = options_.control] {
    if (Status st = control->Cancel(id); !st.ok()) log::Error("slurm", "cancel batch job={}: {}", id, st.ToString());
  });
}

}  // namespace tandem::backends
