// The job manager's core: construction, the journal (records applied and
// made durable, in the order job_manager.h gives), events to subscribers and
// run dirs, lookups and shutdown. The rest is split by concern:
// job_admission.cc (submit), job_scheduler.cc (grants, batches, waiting),
// job_launch.cc (one task's launch), job_exits.cc (exits, restarts),
// job_stop.cc (cancel, failure, end states), job_recovery.cc (restart of
// the daemon), job_run_dir.cc (run dirs).
#include "orchestrator/daemon/job_manager.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "backends/task_env.h"
#include "common/log.h"
#include "orchestrator/store/durable_file.h"

namespace tandem::daemon {

namespace {
using json = nlohmann::json;
namespace fs = std::filesystem;
}  // namespace

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

namespace {
// The limits' names end their messages: how TaskLimitOf tells them apart.
constexpr std::string_view kPerJobLimit = " (--max-tasks-per-job, TANDEM_MAX_TASKS_PER_JOB)";
constexpr std::string_view kDaemonLimit = " (--max-tasks, TANDEM_MAX_TASKS); retry when jobs have ended";
}  // namespace

Status TaskLimitExceeded(TaskLimitKind kind, const std::string& message) {
  return ResourceExhausted(message + std::string(kind == TaskLimitKind::kPerJob ? kPerJobLimit : kDaemonLimit));
}

TaskLimitKind TaskLimitOf(const Status& st) {
  if (st.code() != StatusCode::kResourceExhausted) return TaskLimitKind::kNone;
  const std::string_view m = st.message();
  auto ends = [&](std::string_view tail) { return m.size() >= tail.size() && m.substr(m.size() - tail.size()) == tail; };
  if (ends(kPerJobLimit)) return TaskLimitKind::kPerJob;
  if (ends(kDaemonLimit)) return TaskLimitKind::kDaemon;
  return TaskLimitKind::kNone;
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

Status JobManager::Shutdown() {
  shutting_down_ = true;
  timers_.clear();
  capacity_timer_.reset();
  journal_timer_.reset();
  batch_timer_.reset();
  return log_.Flush();
}

}  // namespace tandem::daemon
