// What became of a step a killed daemon meant to start: see step_intent.h.
#include "backends/slurm/step_intent.h"

#include <signal.h>

#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include "backends/local/exit_record.h"
#include "backends/slurm/adopted_step.h"
#include "backends/slurm/srun_client.h"
#include "backends/slurm/step_control.h"
#include "common/json_field.h"
#include "common/log.h"
#include "common/task_file.h"

namespace tandem::backends::slurm {
namespace {

using std::chrono::milliseconds;

std::string Pids(const std::vector<local::ProcStat>& procs) {
  std::string out;
  for (const auto& p : procs) out += (out.empty() ? "" : ",") + std::to_string(p.pid);
  return out;
}

// How srun ended, from the exec shim's record of it, if that is newer than the intent.
std::optional<std::string> SrunEnded(const std::filesystem::path& exit_path, int64_t since_ms) {
  if (exit_path.empty()) return std::nullopt;
  auto j = ReadTaskJson(exit_path.string() + ".srun.json", local::kMaxExitRecordBytes);
  if (!j || IntField(*j, "ended_at_ms", 0) < since_ms) return std::nullopt;
  const int64_t sig = IntField(*j, "signal", 0);
  return sig ? "signal " + std::to_string(sig) : "code " + std::to_string(IntField(*j, "exit_code", -1));
}

}  // namespace

IntentProbe ProbeIntent(const StepIntent& intent, const std::filesystem::path& exit_path, int signal_clients) {
  IntentProbe p;
  // Clients first: once none lives, none can create the step after squeue looked.
  p.clients = FindSrunClients(intent.step_name);
  if (signal_clients && !p.clients.empty()) SignalProcesses(p.clients, signal_clients);
  auto step = LookupStep(intent.job_id, intent.step_name);
  p.squeue_ok = step.ok();
  if (step.ok()) p.step = *step;
  p.exit_record = HasExitRecordSince(exit_path, intent.at_ms);
  p.srun_ended = SrunEnded(exit_path, intent.at_ms);
  return p;
}

std::string_view ToString(IntentVerdict v) {
  switch (v) {
    case IntentVerdict::kWait: return "wait";
    case IntentVerdict::kAdopt: return "adopt";
    case IntentVerdict::kNeverStarted: return "never-started";
    case IntentVerdict::kEndedUnknown: return "ended-unknown";
  }
  return "?";
}

IntentDecision DecideIntent(const IntentProbe& p, const IntentClock& c) {
  IntentDecision d;
  if (!p.step.empty()) {
    d.verdict = IntentVerdict::kAdopt;
    d.why = "step " + p.step + " is running";
    return d;
  }
  if (p.exit_record) {
    d.verdict = IntentVerdict::kAdopt;
    d.why = "the step left its exit record";
    return d;
  }
  if (!p.clients.empty()) {
    // Being created (or stuck creating): wait, bounded, then stop the client.
    d.verdict = IntentVerdict::kWait;
    if (c.cancel || c.elapsed >= c.create_wait) {
      if (!c.since_term) d.signal_clients = SIGTERM;
      else if (*c.since_term >= c.term_grace) d.signal_clients = SIGKILL;
      d.why = std::string(c.cancel ? "the task was killed" : "no step after " + std::to_string(c.create_wait.count()) +
                                                                 " ms") +
              ": stopping its srun client";
    } else {
      d.why = "its srun client is alive, the step is not created yet";
    }
    return d;
  }
  if (!p.squeue_ok) {
    d.verdict = IntentVerdict::kWait;
    d.why = "squeue did not answer";
    return d;
  }
  if (p.srun_ended && !c.clients_seen) {
    d.verdict = IntentVerdict::kEndedUnknown;
    d.why = "its srun client ended (" + *p.srun_ended +
            ") while no daemon watched, and the step left no exit record: it may have run";
    return d;
  }
  d.verdict = IntentVerdict::kNeverStarted;
  d.why = c.clients_seen ? "its srun client ended before creating the step"
                         : "no srun client, no step, no exit record";
  return d;
}

IntentResolver::IntentResolver(boost::asio::io_context& io, boost::asio::thread_pool& workers, Done done,
                               milliseconds create_wait, milliseconds poll, milliseconds term_grace)
    : io_(io), workers_(workers), done_(std::move(done)), create_wait_(create_wait), poll_(poll),
      term_grace_(term_grace) {}

IntentResolver::~IntentResolver() {
  stop_->store(true);
  alive_.reset();
}

void IntentResolver::Resolve(const std::string& task_id, const StepIntent& intent,
                             const std::filesystem::path& exit_path) {
  Entry e;
  e.intent = intent;
  e.exit_path = exit_path;
  e.started = std::chrono::steady_clock::now();
  e.timer = std::make_unique<boost::asio::steady_timer>(io_);
  entries_[task_id] = std::move(e);
  log::Info("slurm", "task={} step={} has an intent but no .step.json: looking for its srun client and step",
            task_id, intent.step_name);
  Probe(task_id);
}

void IntentResolver::Cancel(const std::string& task_id) {
  auto it = entries_.find(task_id);
  if (it == entries_.end() || it->second.killed) return;
  it->second.killed = true;
  log::Info("slurm", "task={} killed while its step={} was being looked for", task_id, it->second.intent.step_name);
}

void IntentResolver::Probe(const std::string& task_id) {
  auto it = entries_.find(task_id);
  if (it == entries_.end() || stop_->load()) return;
  Entry& e = it->second;
  const int sig = e.next_signal;
  e.next_signal = 0;
  if (sig == SIGTERM && !e.term_at) e.term_at = std::chrono::steady_clock::now();
  boost::asio::post(workers_, [this, weak = std::weak_ptr<int>(alive_), stop = stop_, task_id, intent = e.intent,
                               exit_path = e.exit_path, sig] {
    if (stop->load()) return;
    IntentProbe probe = ProbeIntent(intent, exit_path, sig);
    if (sig && !probe.clients.empty())
      log::Info("slurm", "task={} step={}: sent signal {} to its srun client pids={}", task_id, intent.step_name, sig,
                Pids(probe.clients));
    boost::asio::post(io_, [this, weak, task_id, probe = std::move(probe)]() mutable {
      if (weak.lock()) OnProbe(task_id, std::move(probe));
    });
  });
}

void IntentResolver::OnProbe(const std::string& task_id, IntentProbe probe) {
  auto it = entries_.find(task_id);
  if (it == entries_.end()) return;
  Entry& e = it->second;
  const auto now = std::chrono::steady_clock::now();
  IntentClock c;
  c.elapsed = std::chrono::duration_cast<milliseconds>(now - e.started);
  c.create_wait = create_wait_;
  c.term_grace = term_grace_;
  if (e.term_at) c.since_term = std::chrono::duration_cast<milliseconds>(now - *e.term_at);
  c.cancel = e.killed;
  c.clients_seen = e.clients_seen;
  IntentDecision d = DecideIntent(probe, c);
  if (!probe.clients.empty()) e.clients_seen = true;
  if (d.verdict == IntentVerdict::kWait) {
    if (!e.waiting_logged && !probe.clients.empty()) {
      e.waiting_logged = true;
      log::Info("slurm", "task={} step={}: srun client pids={} alive, step not created yet: waiting up to {} ms",
                task_id, e.intent.step_name, Pids(probe.clients), create_wait_.count());
    }
    if (d.signal_clients) {
      if (d.signal_clients == SIGTERM)
        log::Warn("slurm", "task={} step={}: {}", task_id, e.intent.step_name, d.why);
      e.next_signal = d.signal_clients;
    }
    e.timer->expires_after(poll_);
    e.timer->async_wait([this, weak = std::weak_ptr<int>(alive_), task_id](const boost::system::error_code& ec) {
      if (!ec && weak.lock()) Probe(task_id);
    });
    return;
  }
  Outcome out{e.intent, d};
  log::Info("slurm", "task={} step={}: {} ({})", task_id, e.intent.step_name, ToString(d.verdict), d.why);
  entries_.erase(it);
  done_(task_id, out);
}

}  // namespace tandem::backends::slurm
