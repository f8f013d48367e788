// Admission: a submitted spec becomes a job, or is refused (spec, backend,
// devices, task limits, run dir, journal); the job exists once its
// job_submitted record is durable (job_manager.h, docs/architecture.md "Durability").
#include "orchestrator/daemon/job_manager.h"

#include <algorithm>
#include <cctype>
#include <random>

#include "common/log.h"
#include "orchestrator/daemon/job_run_dir.h"
#include "orchestrator/placement/placement.h"

namespace tandem::daemon {

namespace {
using json = nlohmann::json;
namespace fs = std::filesystem;

std::string NewJobId(const std::string& name) {
  static std::mt19937_64 rng{std::random_device{}()};
  char buf[8];
  std::snprintf(buf, sizeof buf, "%06llx", static_cast<unsigned long long>(rng() & 0xffffff));
  std::string base;
  for (char c : name) base += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') ? c : '-';
  if (base.empty()) base = "job";
  if (base.size() > 40) base.resize(40);
  return base + "-" + buf;
}
}  // namespace

void JobManager::Submit(const nlohmann::ordered_json& raw, SubmitCallback done) {
  spec::ParseResult parsed = spec::ParseJobSpec(raw);
  if (!parsed.spec) return done(parsed.ToStatus());
  const spec::JobSpec& sp = *parsed.spec;
  if (!executors_.count(std::string(spec::BackendKindName(sp.backend.kind)))) {
    std::string enabled;
    for (const auto& [kind, ex] : executors_) enabled += (enabled.empty() ? "\"" : ", \"") + kind + "\"";
    return done(FailedPrecondition("backend.kind: \"" + std::string(spec::BackendKindName(sp.backend.kind)) +
                                   "\" is not enabled in this daemon (enabled: " + enabled + ")"));
  }
  spec::Inventory inv{opts_.gpus};
  if (opts_.own_device_backends.count(std::string(spec::BackendKindName(sp.backend.kind)))) {
    inv.gpus.clear();  // the backend's allocation has exactly the job's devices
    int n = 0;
    for (int d : sp.devices) n = std::max(n, d + 1);
    for (int i = 0; i < n; ++i) inv.gpus.push_back(i);
  }
  if (Status st = spec::CheckFitsInventory(sp, inv); !st.ok()) return done(st);
  if (Status st = CheckTaskLimits(sp); !st.ok()) return done(st);
  // Placement in the job's logical namespace; physical ids are bound at grant time.
  spec::Inventory identity;
  for (size_t i = 0; i < inv.gpus.size(); ++i) identity.gpus.push_back(static_cast<int>(i));
  auto placed = placement::PlaceJob(sp, identity);
  if (!placed.ok()) return done(placed.status());

  Job job;
  job.id = NewJobId(sp.name);
  while (table_.Find(job.id) || submitting_.count(job.id)) job.id = NewJobId(sp.name);
  job.name = sp.name;
  job.spec_text = raw.dump();
  job.backend = std::string(spec::BackendKindName(sp.backend.kind));
  job.logical_devices = sp.devices;
  const fs::path run_root = opts_.run_root.empty() ? opts_.state_dir / "runs" : opts_.run_root;
  job.run_dir = sp.run_dir.empty() ? (run_root / job.id).string()
                                   : (opts_.state_dir / sp.run_dir).lexically_normal().string();
  if (fs::path(sp.run_dir).is_absolute()) job.run_dir = fs::path(sp.run_dir).lexically_normal().string();
  // Before anything touches the dir: no live job (or one being submitted)
  // may have it, inside it or around it, however the path is spelled.
  const fs::path resolved = ResolvedDir(job.run_dir);
  for (const auto& other : table_.jobs)
    if (!IsTerminal(other.state) && DirsOverlap(ResolvedDir(other.run_dir), resolved))
      return done(FailedPrecondition("run_dir: " + job.run_dir + " is in use by running job " + other.id +
                                     " (its run dir " + other.run_dir + ")"));
  for (const auto& [other, sub] : submitting_)
    if (DirsOverlap(ResolvedDir(sub.run_dir), resolved))
      return done(FailedPrecondition("run_dir: " + job.run_dir + " is in use by job " + other + " (being submitted)"));
  job.submitted_ms = NowMs();
  for (const auto& tp : placed->tasks) {
    Task t;
    t.role = tp.role;
    t.rank = tp.rank;
    t.world_size = tp.world_size;
    t.name = tp.role + "." + std::to_string(tp.rank);
    t.id = job.id + "." + t.name;
    t.logical_devices = tp.logical;
    t.submitted_ms = job.submitted_ms;
    job.tasks.push_back(std::move(t));
  }
  // Nothing is touched (run dir, journal) unless the journal can take the job.
  if (Status st = JournalReady(); !st.ok()) {
    log::Warn("jobs", "submit refused job={} error=\"{}\"", job.id, st.ToString());
    return done(st);
  }
  const fs::path run_dir(job.run_dir);
  if (Status st = PrepareDir(run_dir, /*must_be_private=*/true); !st.ok()) return done(st);
  // Another daemon's (or `tandem run`'s) live job may have it: its lock says.
  auto lock = RunDirLock::Acquire(run_dir);
  if (!lock.ok()) {
    log::Warn("jobs", "submit refused job={} error=\"{}\"", job.id, lock.status().ToString());
    return done(lock.status());
  }
  if (fs::exists(run_dir / "job.json")) {
    if (Status st = ArchivePreviousRun(run_dir); !st.ok()) return done(st.WithContext("run_dir"));
  }
  if (Status st = PrepareDir(run_dir / "tasks", false); !st.ok()) return done(st.WithContext("run_dir"));
  if (Status st = WritePrivateFile(run_dir / "job.json", job.ToJson().dump(2) + "\n"); !st.ok())
    return done(st.WithContext("run_dir: write job.json"));
  const std::string id = job.id;
  const size_t task_count = job.tasks.size();
  submitting_[id] = Submitting{job.run_dir, task_count, std::move(lock).value()};
  json record = {{"type", "job_submitted"}, {"seq", submit_seq_++}, {"job", job.ToJson()}};
  // The job exists (and its tasks may launch) only once its record is durable.
  CommitDurably(std::move(record), [this, id, sp, task_count, done](Status st) {
    auto sub = submitting_.extract(id);
    if (!st.ok()) {
      log::Warn("jobs", "submit refused job={} error=\"{}\"", id, st.ToString());
      return done(st);
    }
    if (sub) run_dir_locks_[id] = std::move(sub.mapped().lock);
    specs_.emplace(id, sp);
    metrics_.jobs_submitted->Get().Inc();
    log::Info("jobs", "job submitted job={} tasks={} devices={}", id, task_count, sp.devices.size());
    Schedule();  // the first launch batch, so the answer shows it
    const Job* j = table_.Find(id);
    done(j ? j->ToJson() : json{{"id", id}});
  });
}

Status JobManager::CheckTaskLimits(const spec::JobSpec& sp) const {
  uint64_t tasks = 0;
  for (const auto& role : sp.roles) tasks += static_cast<uint64_t>(std::max(role.replicas, 0));
  if (opts_.max_tasks_per_job && tasks > opts_.max_tasks_per_job)
    return TaskLimitExceeded(TaskLimitKind::kPerJob, "roles: the job has " + std::to_string(tasks) +
                                                         " tasks, over this daemon's limit of " +
                                                         std::to_string(opts_.max_tasks_per_job) + " tasks per job");
  uint64_t live = 0;
  for (const auto& j : table_.jobs)
    if (!IsTerminal(j.state)) live += j.tasks.size();
  for (const auto& [id, sub] : submitting_) live += sub.tasks;
  if (opts_.max_tasks && live + tasks > opts_.max_tasks)
    return TaskLimitExceeded(TaskLimitKind::kDaemon, "roles: the job's " + std::to_string(tasks) + " tasks and the " +
                                                         std::to_string(live) + " of live jobs are over this daemon's limit of " +
                                                         std::to_string(opts_.max_tasks) + " tasks");
  return Status::Ok();
}

}  // namespace tandem::daemon
