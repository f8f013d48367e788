// The job manager; see job_manager.h for the contract and lifecycle.
#include "orchestrator/daemon/job_manager.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <random>

#include "backends/task_env.h"
#include "common/log.h"
#include "orchestrator/placement/placement.h"
#include "orchestrator/store/durable_file.h"

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

// A name for history/<name>/ from an old job.json's "id": only what a job id
// can hold ([A-Za-z0-9._-], not "." or ".."), else "previous". The file is
// the run dir's, and a task may have written it.
std::string ArchiveName(const fs::path& job_json) {
  std::error_code ec;
  const auto size = fs::file_size(job_json, ec);
  if (ec || size > (64u << 20)) return "previous";
  std::ifstream in(job_json);
  const json old = json::parse(in, nullptr, false);
  if (old.is_discarded() || !old.is_object() || !old.contains("id") || !old["id"].is_string()) return "previous";
  const std::string id = old["id"].get<std::string>();
  if (id.empty() || id.size() > 100 || id == "." || id == "..") return "previous";
  for (char c : id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') return "previous";
  return id;
}

// A run dir reused by a new job keeps the old job's files under
// history/<old id>/ (history/<old id>-2/, ... when taken). Every step goes
// through directory fds opened without following symlinks, so a symlink a
// task left (history -> /elsewhere) cannot move files out of the run dir.
Status ArchivePreviousRun(const fs::path& run_dir) {
  const std::string ctx = "archive the previous run in " + run_dir.string();
  store::UniqueFd run(::open(run_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!run) return ErrnoStatus("open " + run_dir.string()).WithContext(ctx);
  if (::mkdirat(run.get(), "history", 0700) != 0 && errno != EEXIST) return ErrnoStatus("mkdir history").WithContext(ctx);
  store::UniqueFd history(::openat(run.get(), "history", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!history)
    return ErrnoStatus("open history (must be a directory, not a symlink)").WithContext(ctx);
  const std::string base = ArchiveName(run_dir / "job.json");
  std::string name = base;
  for (int n = 2; ::mkdirat(history.get(), name.c_str(), 0700) != 0; ++n) {
    if (errno != EEXIST || n > 1000) return ErrnoStatus("mkdir history/" + name).WithContext(ctx);
    name = base + "-" + std::to_string(n);
  }
  store::UniqueFd dest(::openat(history.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dest) return ErrnoStatus("open history/" + name).WithContext(ctx);
  for (const char* entry : {"job.json", "events.jsonl", "tasks", "handoff.jsonl", "residency.jsonl"}) {
    struct stat st;
    if (::fstatat(run.get(), entry, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // not there
    if (::renameat(run.get(), entry, dest.get(), entry) != 0)
      return ErrnoStatus(std::string("move ") + entry + " to history/" + name).WithContext(ctx);
  }
  log::Info("jobs", "previous run archived run_dir={} to=history/{}", run_dir.string(), name);
  return Status::Ok();
}

// The run dir as the file system resolves it (symlinks, ".."), for comparing.
fs::path ResolvedDir(const std::string& dir) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::path(dir), ec);
  if (ec) p = fs::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();  // "a/b/" -> "a/b"
  return p;
}

// One contains the other (or they are the same): the jobs would share files.
bool DirsOverlap(const fs::path& a, const fs::path& b) {
  auto [ia, ib] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  return ia == a.end() || ib == b.end();
}

// Creates `dir` if needed; a dir this creates is 0755 whatever the umask.
// One that exists must not be writable by others (they could replace what
// the job writes there).
Status PrepareDir(const fs::path& dir, bool must_be_private) {
  std::error_code ec;
  const bool existed = fs::exists(dir, ec);
  std::vector<fs::path> missing;  // outermost last
  for (fs::path p = fs::absolute(dir, ec).lexically_normal(); !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
    if (p.filename().empty()) continue;
    missing.push_back(p);
    if (p == p.parent_path()) break;
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (::mkdir(it->c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus("create " + it->string());
    if (::chmod(it->c_str(), 0755) != 0) return ErrnoStatus("chmod " + it->string());  // whatever the umask
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return ErrnoStatus("stat " + dir.string());
  if (!existed || !must_be_private) {
    if ((st.st_mode & 07777) != 0755 && ::chmod(dir.c_str(), 0755) != 0) return ErrnoStatus("chmod " + dir.string());
  } else if (st.st_mode & S_IWOTH) {
    return FailedPrecondition("run_dir: " + dir.string() +
                              " is writable by every user; choose a directory only you can write");
  }
  return Status::Ok();
}

// Writes `text` to `path` as 0600 (tmp + fsync + rename): job.json holds the spec's environment.
Status WritePrivateFile(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  auto fd = store::WriteSyncedFile(tmp, text);
  if (!fd.ok()) {
    (void)store::RemoveIfExists(tmp);
    return fd.status();
  }
  return store::RenameDurably(tmp, path);
}

// Job details while a task waits for capacity (Schedule), cleared once it launched.
constexpr const char* kWaitingPrefix = "waiting for capacity";
constexpr const char* kQueuedPrefix = "queued behind job ";

fs::path TaskFile(const Job& job, const Task& task, const char* ext) {
  return fs::path(job.run_dir) / "tasks" / (task.name + ext);
}
}  // namespace

std::string ExitDetail(const backends::TaskExit& e) {
  if (!e.status_known) return e.detail.empty() ? "exit status unknown" : e.detail;
  std::string s;
  if (e.signal) s = "killed by signal " + std::to_string(e.signal) + " (" + (sigabbrev_np(e.signal) ? std::string("SIG") + sigabbrev_np(e.signal) : "?") + ")";
  else s = "exit code " + std::to_string(e.exit_code);
  // The shim's own detail repeats how the command ended; keep only news.
  if (!e.detail.empty() && e.detail.rfind("killed by signal", 0) != 0 && e.detail.rfind("exit", 0) != 0)
    s += ": " + e.detail;
  return s;
}

JobManager::JobManager(boost::asio::io_context& io, JobManagerOptions opts,
                       store::DurableLog& log, std::map<std::string, backends::Executor*> executors,
                       backends::PortLeaseRegistry& ports, DaemonMetrics& metrics)
    : io_(io), opts_(std::move(opts)), log_(log), executors_(std::move(executors)), ports_(ports), metrics_(metrics) {}

JobManager::~JobManager() = default;

// ---------------------------------------------------------------- records

void JobManager::Commit(json record) {
  if (!record.contains("at")) record["at"] = NowMs();
  Status st = Apply(table_, record);
  if (!st.ok()) {
    // A record that does not apply is a bug in this file, not bad input.
    log::Error("jobs", "record refused: {} record={}", st.ToString(), record.dump());
    return;
  }
  // What it reports already happened: memory keeps it even if the journal refuses it.
  if (Status w = log_.Write(record, [this](Status d) { if (!d.ok()) JournalDiverged(d); }); !w.ok())
    JournalDiverged(w);
  Publish(record);
  MaybeCompact();
}

void JobManager::CommitDurably(json record, std::function<void(Status)> done) {
  if (!record.contains("at")) record["at"] = NowMs();
  // Refuse now what would not apply once durable (a bug in this file).
  if (record.value("type", "") != "job_submitted" &&
      (!record["job"].is_string() || !table_.Find(record["job"].get<std::string>()))) {
    log::Error("jobs", "record refused: unknown job record={}", record.dump());
    return done(Internal("record for an unknown job"));
  }
  auto on_durable = [this, record, done](Status st) {
    if (!st.ok()) {
      log::Warn("jobs", "journal refused record type={} error=\"{}\"", record.value("type", ""), st.ToString());
      return done(JournalUnavailable(st));
    }
    if (Status a = Apply(table_, record); !a.ok()) {
      log::Error("jobs", "durable record does not apply: {} record={}", a.ToString(), record.dump());
      return done(a);
    }
    Publish(record);
    done(Status::Ok());
    MaybeCompact();
  };
  if (Status w = log_.Write(record, std::move(on_durable)); !w.ok()) {
    log::Warn("jobs", "journal refused record type={} error=\"{}\"", record.value("type", ""), w.ToString());
    done(JournalUnavailable(w));
  }
}

void JobManager::Publish(const json& record) {
  Event ev{++event_seq_, record};
  ev.body["seq"] = ev.seq;
  const json& jref = record["job"];
  const std::string job_id = jref.is_string() ? jref.get<std::string>() : jref.value("id", "");
  if (Job* job = table_.Find(job_id)) WriteEventLine(*job, ev.body);
  ++publishing_;
  for (auto& [token, cb] : subscribers_) cb(ev);  // a callback may unsubscribe: deferred below
  if (--publishing_ == 0) {
    for (uint64_t t : unsubscribed_) subscribers_.erase(t);
    unsubscribed_.clear();
  }
}

void JobManager::MaybeCompact() {
  if (journal_diverged_ || log_.records_since_compaction() < opts_.compact_every) return;
  if (Status cs = log_.Compact(table_.ToJson()); !cs.ok())
    log::Error("jobs", "compaction failed: {}", cs.ToString());
}

Status JournalUnavailable(const Status& cause) {
  return Unavailable("journal unavailable: " + cause.ToString());
}

bool IsJournalUnavailable(const Status& st) {
  return st.code() == StatusCode::kUnavailable && st.message().rfind("journal unavailable", 0) == 0;
}

Status JobManager::JournalReady() {
  if (journal_diverged_)
    return JournalUnavailable(Unavailable("records of running jobs are not durable yet; retrying"));
  if (Status h = log_.Headroom(); !h.ok()) return JournalUnavailable(h);
  return Status::Ok();
}

void JobManager::JournalDiverged(const Status& why) {
  if (!journal_diverged_)
    log::Error("jobs", "journal refused a record of what happened; starting nothing new until the state is "
               "durable again error=\"{}\"", why.ToString());
  journal_diverged_ = true;
  ArmJournalRetry();
}

// Retries while the journal is unusable: a snapshot of the whole state makes
// a diverged memory durable again; then whatever waited (launches) goes on.
void JobManager::ArmJournalRetry() {
  if (journal_timer_ || shutting_down_) return;
  journal_timer_ = std::make_unique<boost::asio::steady_timer>(io_, opts_.journal_retry);
  journal_timer_->async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    journal_timer_.reset();
    if (journal_diverged_) {
      if (Status cs = log_.Compact(table_.ToJson()); !cs.ok()) {
        log::Warn("jobs", "journal still unavailable error=\"{}\"", cs.ToString());
        return ArmJournalRetry();
      }
      journal_diverged_ = false;
      log::Info("jobs", "journal durable again (snapshot of the whole state written)");
    }
    Schedule();  // re-arms the retry if the journal still has no headroom
  });
}

void JobManager::WriteEventLine(const Job& job, const json& record) {
  // Best effort, not fsync'd: the journal is the truth; this is for people.
  // 0600: job_submitted carries the spec and its environment.
  json line = record;
  if (line.contains("job") && line["job"].is_object()) line["job"] = job.id;  // keep lines short
  const std::string text = line.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  store::UniqueFd fd(::open((fs::path(job.run_dir) / "events.jsonl").c_str(),
                            O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd || !store::WriteAll(fd.get(), text, fs::path(job.run_dir) / "events.jsonl").ok())
    log::Debug("jobs", "events.jsonl of job={} not written errno={}", job.id, errno);
}

uint64_t JobManager::Subscribe(EventCallback cb) {
  subscribers_[next_token_] = std::move(cb);
  return next_token_++;
}
void JobManager::Unsubscribe(uint64_t token) {
  if (publishing_) unsubscribed_.push_back(token);
  else subscribers_.erase(token);
}

// ---------------------------------------------------------------- submit

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
  if (fs::exists(run_dir / "job.json")) {
    if (Status st = ArchivePreviousRun(run_dir); !st.ok()) return done(st.WithContext("run_dir"));
  }
  if (Status st = PrepareDir(run_dir / "tasks", false); !st.ok()) return done(st.WithContext("run_dir"));
  if (Status st = WritePrivateFile(run_dir / "job.json", job.ToJson().dump(2) + "\n"); !st.ok())
    return done(st.WithContext("run_dir: write job.json"));
  const std::string id = job.id;
  const size_t task_count = job.tasks.size();
  submitting_[id] = {job.run_dir, task_count};
  json record = {{"type", "job_submitted"}, {"seq", submit_seq_++}, {"job", job.ToJson()}};
  // The job exists (and its tasks may launch) only once its record is durable.
  CommitDurably(std::move(record), [this, id, sp, task_count, done](Status st) {
    submitting_.erase(id);
    if (!st.ok()) {
      log::Warn("jobs", "submit refused job={} error=\"{}\"", id, st.ToString());
      return done(st);
    }
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
    return ResourceExhausted("roles: the job has " + std::to_string(tasks) + " tasks, over this daemon's limit of " +
                             std::to_string(opts_.max_tasks_per_job) +
                             " tasks per job (--max-tasks-per-job, TANDEM_MAX_TASKS_PER_JOB)");
  uint64_t live = 0;
  for (const auto& j : table_.jobs)
    if (!IsTerminal(j.state)) live += j.tasks.size();
  for (const auto& [id, sub] : submitting_) live += sub.tasks;
  if (opts_.max_tasks && live + tasks > opts_.max_tasks)
    return ResourceExhausted("roles: the job's " + std::to_string(tasks) + " tasks and the " + std::to_string(live) +
                             " of live jobs are over this daemon's limit of " + std::to_string(opts_.max_tasks) +
                             " tasks (--max-tasks, TANDEM_MAX_TASKS); retry when jobs have ended");
  return Status::Ok();
}

// ---------------------------------------------------------------- scheduling

bool JobManager::GrantDevices(Job& job) {
  if (job.logical_devices.empty() || !job.physical_devices.empty()) return true;
  if (opts_.own_device_backends.count(job.backend)) {
    Commit({{"type", "job_devices"}, {"job", job.id}, {"physical_devices", job.logical_devices}});
    return true;
  }
  std::vector<int> grant;
  if (SpecOf(job).raw.contains("devices") && SpecOf(job).raw["devices"].contains("ids")) {
    // An explicit list names inventory positions.
    for (int l : job.logical_devices) {
      int phys = opts_.gpus.at(static_cast<size_t>(l));
      if (busy_gpus_.count(phys)) return false;
      grant.push_back(phys);
    }
  } else {
    for (int g : opts_.gpus) {
      if (grant.size() == job.logical_devices.size()) break;
      if (!busy_gpus_.count(g)) grant.push_back(g);
    }
    if (grant.size() < job.logical_devices.size()) return false;
  }
  for (int g : grant) busy_gpus_.insert(g);
  Commit({{"type", "job_devices"}, {"job", job.id}, {"physical_devices", grant}});
  return true;
}

void JobManager::Schedule() {
  if (shutting_down_) return;
  if (scheduling_) {  // a launch failure stopped a job, which ended and asked again
    schedule_again_ = true;
    return;
  }
  // Nothing new starts unless the journal holds everything and has headroom.
  if (Status ready = JournalReady(); !ready.ok()) {
    if (!journal_blocked_logged_)
      log::Warn("jobs", "launches held until the journal has space error=\"{}\"", ready.ToString());
    journal_blocked_logged_ = true;
    return ArmJournalRetry();
  }
  if (journal_blocked_logged_) log::Info("jobs", "journal has space again; launches resume");
  journal_blocked_logged_ = false;
  scheduling_ = true;
  size_t budget = std::max<size_t>(opts_.launch_batch, 1);  // launches in this call
  bool more = false;  // the budget ran out: the next batch is posted
  do {
    schedule_again_ = false;
    // Backend -> the job at the head of its line that waits for capacity.
    std::map<std::string, std::string> blocked_by;
    std::set<std::string> down;  // backends that said Unavailable in this pass: not asked again
    for (auto& job : table_.jobs) {
      if (IsTerminal(job.state) || job.cancel_requested || stopping_.count(job.id)) continue;
      const bool started = job.state == JobState::kRunning;
      if (started && down.count(job.backend)) continue;
      if (auto head = blocked_by.find(job.backend); !started && head != blocked_by.end()) {
        SetJobDetail(job, std::string(kQueuedPrefix) + head->second + ", which waits for capacity");
        continue;
      }
      if (!GrantDevices(job)) {
        const std::string why = "waiting for " + std::to_string(job.logical_devices.size()) +
                                " devices (" + std::to_string(opts_.gpus.size() - busy_gpus_.size()) + " free)";
        if (job.detail != why) Commit({{"type", "job_state"}, {"job", job.id}, {"state", "pending"}, {"detail", why}});
        continue;
      }
      Launch outcome = Launch::kStarted;
      bool launched = false;
      for (auto& task : job.tasks) {
        // A restarting task without its backoff timer waits for capacity.
        const bool relaunch = task.state == TaskState::kRestarting && !timers_.count(job.id + "/" + task.name);
        if (task.state != TaskState::kPending && !relaunch) continue;
        if (budget == 0) {
          more = true;
          break;
        }
        outcome = LaunchTask(job, task);
        if (outcome != Launch::kStarted) break;  // in order: a job stops at its first waiting task
        launched = true;
        --budget;
      }
      if (outcome == Launch::kFailed || IsTerminal(job.state) || stopping_.count(job.id)) continue;
      if (outcome == Launch::kBackendDown) {
        down.insert(job.backend);
        outcome = Launch::kWaiting;
      }
      if (outcome == Launch::kWaiting) blocked_by.emplace(job.backend, job.id);
      const bool stale = job.detail.rfind(kWaitingPrefix, 0) == 0 || job.detail.rfind(kQueuedPrefix, 0) == 0;
      if (job.state == JobState::kPending && launched)
        Commit({{"type", "job_state"}, {"job", job.id}, {"state", "running"},
                {"detail", outcome == Launch::kWaiting ? job.detail : ""}});
      else if (job.state == JobState::kPending && outcome == Launch::kStarted)
        Commit({{"type", "job_state"}, {"job", job.id}, {"state", "running"}, {"detail", ""}});
      else if (outcome == Launch::kStarted && stale)
        SetJobDetail(job, "");
      if (more) break;  // later jobs wait for the next batch: submission order holds
    }
  } while (schedule_again_ && !more && !shutting_down_);
  scheduling_ = false;
  if (more && !batch_timer_) {
    // Behind whatever the io_context has queued (API requests, exits).
    batch_timer_ = std::make_unique<boost::asio::steady_timer>(io_, std::chrono::milliseconds(0));
    batch_timer_->async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      batch_timer_.reset();
      Schedule();
    });
  }
}

void JobManager::SetJobDetail(Job& job, const std::string& detail) {
  if (job.detail == detail) return;
  Commit({{"type", "job_state"}, {"job", job.id}, {"state", ToString(job.state)}, {"detail", detail}});
}

void JobManager::MarkWaiting(Job& job, Task& task, const std::string& why) {
  const std::string detail = std::string(kWaitingPrefix) + ": task " + task.name + ": " + why;
  if (job.detail != detail) log::Info("jobs", "task waiting for capacity task={} reason=\"{}\"", task.id, why);
  const std::string task_detail = std::string(kWaitingPrefix) + ": " + why;
  if (task.state == TaskState::kPending && task.detail != task_detail)  // a restarting one keeps its exit's detail
    Commit({{"type", "task_state"}, {"job", job.id}, {"task", task.name}, {"state", "pending"},
            {"detail", task_detail}});
  SetJobDetail(job, detail);
  if (capacity_timer_) return;
  capacity_timer_ = std::make_unique<boost::asio::steady_timer>(io_, opts_.capacity_retry);
  capacity_timer_->async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;
    capacity_timer_.reset();  // re-armed by whatever still waits
    Schedule();
  });
}

JobManager::Launch JobManager::LaunchTask(Job& job, Task& task) {
  const spec::JobSpec& sp = SpecOf(job);
  const spec::RoleSpec* role = sp.FindRole(task.role);
  if (!role) {
    Commit({{"type", "task_state"}, {"job", job.id}, {"task", task.name}, {"state", "failed"},
            {"detail", "spec no longer parses for role " + task.role}});
    StopJob(job, "task " + task.name + " could not be launched");
    return Launch::kFailed;
  }
  std::vector<int> ports;
  if (role->ports > 0) {
    auto leased = ports_.Lease(task.id, role->ports);
    if (!leased.ok()) {
      Commit({{"type", "task_state"}, {"job", job.id}, {"task", task.name}, {"state", "failed"},
              {"detail", leased.status().message()}});
      StopJob(job, "task " + task.name + ": no ports");
      return Launch::kFailed;
    }
    ports = *leased;
  }
  backends::TaskEnvInput in;
  in.job_env = sp.env;
  in.role_env = role->env;
  if (!role->replica_env.empty()) in.replica_env = role->replica_env.at(static_cast<size_t>(task.rank));
  in.job_id = job.id;
  in.task_id = task.id;
  in.role = task.role;
  in.rank = task.rank;
  in.world_size = task.world_size;
  in.ports = ports;
  in.run_dir = job.run_dir;
  in.logical_devices = task.logical_devices;
  in.physical_devices = task.physical_devices;
  in.control = opts_.control_endpoint;
  if (opts_.control_env) {
    in.task_overrides = opts_.control_env(job.backend, job.id, task.id, task.launches + 1);
    if (auto c = in.task_overrides.find("TANDEM_CONTROL"); c != in.task_overrides.end()) {
      in.control = c->second;
      in.task_overrides.erase(c);
    }
  }

  backends::LaunchRequest req;
  req.job_id = job.id;
  req.task_id = task.id;
  req.argv = role->command;
  if (!role->worker.empty()) {
    req.argv = {opts_.worker_binary.empty() ? std::string("tandem-worker") : opts_.worker_binary, role->worker};
    req.argv.insert(req.argv.end(), role->args.begin(), role->args.end());
  }
  req.env = backends::BuildTaskEnvironment(in);
  req.cwd = role->cwd.empty() ? fs::path(job.run_dir) : fs::path(job.run_dir) / role->cwd;
  req.stdout_path = TaskFile(job, task, ".out");
  req.stderr_path = TaskFile(job, task, ".err");
  req.exit_path = TaskFile(job, task, ".exit");
  std::error_code ec;
  fs::remove(req.exit_path, ec);
  // Output may echo the spec's environment: 0600 (the executor appends to what is there).
  for (const fs::path& p : {req.stdout_path, req.stderr_path}) {
    store::UniqueFd fd(::open(p.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (fd) (void)::fchmod(fd.get(), 0600);
  }

  backends::Executor* ex = ExecutorOf(job);
  auto started = ex ? ex->Start(req) : StatusOr<backends::TaskRef>(FailedPrecondition("backend \"" + job.backend + "\" is not enabled in this daemon"));
  if (!started.ok()) {
    ports_.Release(task.id);
    if (backends::IsRetryableStart(started.status())) {  // nothing started: wait for capacity
      MarkWaiting(job, task, started.status().message());
      return started.status().code() == StatusCode::kUnavailable ? Launch::kBackendDown : Launch::kWaiting;
    }
    Commit({{"type", "task_state"}, {"job", job.id}, {"task", task.name}, {"state", "failed"},
            {"detail", started.status().message()}});
    StopJob(job, "task " + task.name + " could not be launched");
    return Launch::kFailed;
  }
  metrics_.task_launches->Get().Inc();
  if (task.launches == 0)
    metrics_.launch_latency->Get().Observe(static_cast<double>(NowMs() - job.submitted_ms) / 1000.0);
  Commit({{"type", "task_state"}, {"job", job.id}, {"task", task.name}, {"state", "running"},
          {"detail", ""}, {"ref", started->ToJson()}, {"ports", ports},
          {"launches", task.launches + 1}});
  return Launch::kStarted;
}

backends::Executor* JobManager::ExecutorOf(const Job& job) {
  auto it = executors_.find(job.backend);
  return it == executors_.end() ? nullptr : it->second;
}

const spec::JobSpec& JobManager::SpecOf(const Job& job) {
  auto it = specs_.find(job.id);
  if (it != specs_.end()) return it->second;
  auto parsed = spec::ParseJobSpecText(job.spec_text);
  // A journaled spec was valid when accepted; an empty spec (no roles) makes
  // every lookup fail cleanly if a later parser version disagrees.
  spec::JobSpec& spec = specs_[job.id];
  if (parsed.spec) spec = std::move(*parsed.spec);
  return spec;
}

// ---------------------------------------------------------------- exits

Job* JobManager::JobOfTask(std::string_view task_id, Task** task) {
  for (auto& job : table_.jobs) {
    if (IsTerminal(job.state)) continue;
    if (Task* t = job.FindTask(task_id)) { *task = t; return &job; }
  }
  return nullptr;
}

void JobManager::OnTaskExit(const std::string& task_id, const backends::TaskExit& exit) {
  HandleTaskExit(task_id, exit);
  if (capacity_timer_ && !shutting_down_) Schedule();  // the task's capacity is free now
}

void JobManager::HandleTaskExit(const std::string& task_id, const backends::TaskExit& exit) {
  if (shutting_down_) return;
  ports_.Release(task_id);
  Task* task = nullptr;
  Job* job = JobOfTask(task_id, &task);
  if (!job || task->state != TaskState::kRunning) {
    log::Warn("jobs", "exit of unknown or not-running task={} ignored", task_id);
    return;
  }
  const std::string detail = ExitDetail(exit);
  const json ex = exit.ToJson();
  log::Info("jobs", "task exited task={} {}", task_id, detail);
  const spec::RoleSpec* role = SpecOf(*job).FindRole(task->role);
  const spec::RestartPolicy rs = role ? role->restart : spec::RestartPolicy{};
  std::string reason;
  const TaskObserver::Verdict verdict =
      observer_ && !job->cancel_requested && !stopping_.count(job->id)
          ? observer_->OnTaskExit(*job, *task, exit, &reason)
          : TaskObserver::Verdict::kDefault;
  if (verdict == TaskObserver::Verdict::kRestartNow) {
    const int max = rs.kind == spec::RestartPolicy::Kind::kNever ? 3 : rs.max_restarts;
    if (task->restarts < max) {
      Commit({{"type", "task_state"}, {"job", job->id}, {"task", task->name}, {"state", "restarting"},
              {"detail", detail + "; handoff restart " + std::to_string(task->restarts + 1) + "/" +
                             std::to_string(max)},
              {"exit", ex}, {"ports", json::array()}, {"restarts", task->restarts + 1}});
      metrics_.task_restarts->Get().Inc();
      return StartRestartTimer(*job, *task, std::chrono::milliseconds(0));
    }
    reason = "handoff restarts exhausted (" + std::to_string(max) + "): " + detail;
  }
  if (verdict != TaskObserver::Verdict::kDefault) {
    Commit({{"type", "task_state"}, {"job", job->id}, {"task", task->name},
            {"state", exit.status_known ? "failed" : "lost"}, {"detail", detail}, {"exit", ex},
            {"ports", json::array()}});
    return StopJob(*job, reason);
  }
  if (job->cancel_requested || stopping_.count(job->id)) {
    const bool ok_exit = exit.succeeded();
    const char* st = job->cancel_requested ? "cancelled" : (ok_exit ? "succeeded" : "cancelled");
    Commit({{"type", "task_state"}, {"job", job->id}, {"task", task->name}, {"state", st},
            {"detail", detail}, {"exit", ex}, {"ports", json::array()}});
    return MaybeFinishJob(*job);
  }
  const bool ok = exit.succeeded();
  const bool wants_restart = (rs.kind == spec::RestartPolicy::Kind::kAlways) ||
                             (rs.kind == spec::RestartPolicy::Kind::kOnFailure && !ok);
  if (wants_restart && task->restarts < rs.max_restarts) {
    const double delay_s = std::min(rs.backoff_max_s, rs.backoff_initial_s * (1 << std::min(task->restarts, 20)));
    Commit({{"type", "task_state"}, {"job", job->id}, {"task", task->name}, {"state", "restarting"},
            {"detail", detail + "; restart " + std::to_string(task->restarts + 1) + "/" +
                           std::to_string(rs.max_restarts) + " in " + std::to_string(delay_s) + "s"},
            {"exit", ex}, {"ports", json::array()}, {"restarts", task->restarts + 1}});
    metrics_.task_restarts->Get().Inc();
    return StartRestartTimer(*job, *task, std::chrono::milliseconds(static_cast<int64_t>(delay_s * 1000)));
  }
  if (ok) {
    Commit({{"type", "task_state"}, {"job", job->id}, {"task", task->name}, {"state", "succeeded"},
            {"detail", detail}, {"exit", ex}, {"ports", json::array()}});
    return MaybeFinishJob(*job);
  }
  Commit({{"type", "task_state"}, {"job", job->id}, {"task", task->name},
          {"state", exit.status_known ? "failed" : "lost"}, {"detail", detail}, {"exit", ex},
          {"ports", json::array()}});
  StopJob(*job, "task " + task->name + " " + (exit.status_known ? "failed" : "was lost") + ": " + detail);
}

void JobManager::StartRestartTimer(Job& job, Task& task, std::chrono::milliseconds delay) {
  auto timer = std::make_unique<boost::asio::steady_timer>(io_, delay);
  const std::string job_id = job.id, name = task.name;
  timer->async_wait([this, job_id, name](const boost::system::error_code& ec) {
    if (ec) return;
    timers_.erase(job_id + "/" + name);
    Schedule();  // launches the task (no timer now), in its job's turn; it may wait for capacity
  });
  timers_[job.id + "/" + task.name] = std::move(timer);
}

// ---------------------------------------------------------------- stop / cancel

void JobManager::Cancel(std::string_view job_id, std::function<void(Status)> done) {
  Job* job = table_.Find(job_id);
  if (!job) return done(NotFound("no job " + std::string(job_id)));
  if (IsTerminal(job->state) || job->cancel_requested) return done(Status::Ok());
  // Recorded before any task is signalled: after a crash the job comes back
  // as cancelled, never as failed by the SIGTERM it was sent.
  const std::string id = job->id;
  CommitDurably({{"type", "job_cancel"}, {"job", id}}, [this, id, done](Status st) {
    if (!st.ok()) return done(st);
    if (Job* j = table_.Find(id); j && !IsTerminal(j->state)) StopJob(*j, "cancelled");
    done(Status::Ok());
  });
}

Status JobManager::Cancel(std::string_view job_id) {
  if (!table_.Find(job_id)) return NotFound("no job " + std::string(job_id));
  Cancel(job_id, [id = std::string(job_id)](Status st) {
    if (!st.ok()) log::Warn("jobs", "cancel job={} failed: {}", id, st.ToString());
  });
  return Status::Ok();
}

Status JobManager::KillTask(std::string_view job_id, std::string_view task_name) {
  Job* job = table_.Find(job_id);
  Task* t = job ? job->FindTask(task_name) : nullptr;
  if (!t) return NotFound("no task " + std::string(job_id) + "/" + std::string(task_name));
  if (t->state != TaskState::kRunning) return Status::Ok();
  TANDEM_ASSIGN_OR_RETURN(auto ref, backends::TaskRef::FromJson(t->ref), "task ref");
  backends::Executor* ex = ExecutorOf(*job);
  if (!ex) return FailedPrecondition("backend \"" + job->backend + "\" is not enabled in this daemon");
  log::Info("jobs", "killing task={} on request", t->id);
  return ex->Kill(ref);
}

void JobManager::FailJob(std::string_view job_id, const std::string& reason) {
  Job* job = table_.Find(job_id);
  if (!job || IsTerminal(job->state)) return;
  job->detail = reason;
  StopJob(*job, reason);
}

void JobManager::StopJob(Job& job, std::string reason) {
  if (!stopping_.insert(job.id).second) return MaybeFinishJob(job);
  log::Info("jobs", "stopping job={} reason=\"{}\"", job.id, reason);
  if (job.detail.empty() || !job.cancel_requested) job.detail = reason;  // in memory until the end record
  for (auto& t : job.tasks) {
    if (t.state == TaskState::kPending || t.state == TaskState::kRestarting) {
      timers_.erase(job.id + "/" + t.name);
      Commit({{"type", "task_state"}, {"job", job.id}, {"task", t.name}, {"state", "cancelled"},
              {"detail", "not started: " + reason}});
    } else if (t.state == TaskState::kRunning) {
      if (auto ref = backends::TaskRef::FromJson(t.ref); ref.ok() && ExecutorOf(job)) {
        if (Status st = ExecutorOf(job)->Signal(*ref, SIGTERM); !st.ok())
          log::Warn("jobs", "SIGTERM task={} failed: {}", t.id, st.ToString());
      }
    }
  }
  auto timer = std::make_unique<boost::asio::steady_timer>(io_, opts_.grace);
  const std::string id = job.id;
  timer->async_wait([this, id](const boost::system::error_code& ec) {
    if (ec) return;
    Job* j = table_.Find(id);
    if (!j || IsTerminal(j->state)) return;
    for (auto& t : j->tasks) {
      if (t.state != TaskState::kRunning) continue;
      auto ref = backends::TaskRef::FromJson(t.ref);
      if (!ref.ok() || !ExecutorOf(*j)) continue;
      log::Warn("jobs", "grace period over, killing task={}", t.id);
      if (Status st = ExecutorOf(*j)->Kill(*ref); !st.ok()) log::Error("jobs", "kill task={}: {}", t.id, st.ToString());
    }
  });
  timers_[job.id + "/stop"] = std::move(timer);
  MaybeFinishJob(job);
}

void JobManager::MaybeFinishJob(Job& job) {
  if (IsTerminal(job.state)) return;
  bool any_failed = false, all_ok = true;
  for (const auto& t : job.tasks) {
    if (!IsTerminal(t.state)) return;
    any_failed |= (t.state == TaskState::kFailed || t.state == TaskState::kLost);
    all_ok &= (t.state == TaskState::kSucceeded);
  }
  std::string state = "succeeded", detail;
  if (job.cancel_requested) { state = "cancelled"; detail = "cancelled by request"; }
  else if (any_failed || !all_ok) {
    state = "failed";
    detail = job.detail;
    if (detail.empty())
      for (const auto& t : job.tasks)
        if (t.state == TaskState::kFailed || t.state == TaskState::kLost) { detail = "task " + t.name + ": " + t.detail; break; }
  }
  timers_.erase(job.id + "/stop");
  stopping_.erase(job.id);
  specs_.erase(job.id);
  if (!opts_.own_device_backends.count(job.backend))
    for (int g : job.physical_devices) busy_gpus_.erase(g);
  if (!job.physical_devices.empty())
    Commit({{"type", "job_devices"}, {"job", job.id}, {"physical_devices", json::array()}});
  Commit({{"type", "job_state"}, {"job", job.id}, {"state", state}, {"detail", detail}});
  metrics_.jobs_finished->WithLabels({state}).Inc();
  if (observer_) observer_->OnJobEnded(job);
  if (opts_.on_job_ended) opts_.on_job_ended(job.id, job.backend);  // e.g. cancel its Slurm allocation
  log::Info("jobs", "job ended job={} state={} detail=\"{}\"", job.id, state, detail);
  Schedule();  // devices may have freed up
}

// ---------------------------------------------------------------- recovery

Status JobManager::Recover(const store::Recovered& rec) {
  if (!rec.snapshot.is_null()) {
    TANDEM_ASSIGN_OR_RETURN(table_, JobTable::FromJson(rec.snapshot), "recover snapshot");
  }
  for (const auto& r : rec.records) TANDEM_RETURN_IF_ERROR(Apply(table_, r), "recover journal");
  event_seq_ = rec.records.size();
  submit_seq_ = table_.next_seq;
  for (const auto& w : rec.warnings) log::Warn("store", "{}", w);
  size_t reattached = 0;
  for (auto& job : table_.jobs) {
    if (IsTerminal(job.state)) continue;
    if (!opts_.own_device_backends.count(job.backend))
      for (int g : job.physical_devices) busy_gpus_.insert(g);
    for (auto& t : job.tasks) {
      if (t.state == TaskState::kRunning) {
        if (!t.ports.empty())
          if (Status ps = ports_.Adopt(t.id, t.ports); !ps.ok())
            log::Warn("jobs", "ports of task={} not re-adopted: {}", t.id, ps.ToString());
        auto ref = backends::TaskRef::FromJson(t.ref);
        backends::Executor* ex = ExecutorOf(job);
        Status st = !ref.ok() ? ref.status()
                    : ex ? ex->Reattach(*ref)
                         : FailedPrecondition("backend \"" + job.backend + "\" is not enabled in this daemon");
        if (!st.ok()) {
          Commit({{"type", "task_state"}, {"job", job.id}, {"task", t.name}, {"state", "lost"},
                  {"detail", "could not re-attach: " + st.message()}});
        } else {
          ++reattached;
        }
      } else if (t.state == TaskState::kRestarting) {
        StartRestartTimer(job, t, std::chrono::milliseconds(0));
      }
    }
  }
  log::Info("jobs", "recovered jobs={} reattached_tasks={}", table_.jobs.size(), reattached);
  for (auto& job : table_.jobs) {
    if (IsTerminal(job.state)) continue;
    bool failed = false;
    for (const auto& t : job.tasks) failed |= (t.state == TaskState::kFailed || t.state == TaskState::kLost);
    if (job.cancel_requested) StopJob(job, "cancelled");
    else if (failed) StopJob(job, "a task failed");
    else MaybeFinishJob(job);
  }
  Schedule();
  return Status::Ok();
}

Status JobManager::Shutdown() {
  shutting_down_ = true;
  timers_.clear();
  capacity_timer_.reset();
  journal_timer_.reset();
  batch_timer_.reset();
  return log_.Flush();
}

}  // namespace tandem::daemon
