// `tandem run SPEC`: an embedded daemon on a private state dir runs one job
// and the command exits with the job's outcome (docs/cli.md). Ctrl-C cancels
// the job cleanly (SIGTERM, grace, SIGKILL) and waits until nothing of it
// runs. Run dirs are the spec's run_dir, else ./runs/<job id>, printed
// relative to the current directory when below it. While it runs, other
// `tandem` commands can reach it with --socket <state dir>/tandemd.sock
// (printed).
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <map>

#include <boost/asio/signal_set.hpp>

#include <fmt/format.h>

#include "common/log.h"
#include "orchestrator/cli/commands.h"
#include "orchestrator/daemon/daemon.h"
#include "orchestrator/report/residency_model.h"
#include "orchestrator/report/rl_summary.h"

namespace tandem::cli {

namespace {
using json = nlohmann::json;
namespace fs = std::filesystem;

// "actor: running=2  rollout: running=1 pending=0"
std::string RoleLine(const daemon::Job& job) {
  std::map<std::string, std::map<std::string, int>> by_role;
  std::vector<std::string> order;
  for (const auto& t : job.tasks) {
    if (!by_role.count(t.role)) order.push_back(t.role);
    by_role[t.role][std::string(daemon::ToString(t.state))]++;
  }
  std::string line;
  for (const auto& role : order) {
    line += (line.empty() ? "" : "   ") + role + ":";
    for (const auto& [state, n] : by_role[role]) line += " " + state + "=" + std::to_string(n);
  }
  return line;
}
// One line per metrics line a worker sent with a step (the actor's per-step
// line, docs/rl.md "Metrics"): the keys a user follows first, when present,
// else the first six. "[run] actor/0 step 3: reward/mean 0.41  accuracy 0.38"
std::string ProgressLine(const std::string& worker, int64_t step, const daemon::WorkerMetrics::Values& values) {
  static const char* const kFirst[] = {"reward/mean", "accuracy", "eval/accuracy", "response_length/mean",
                                       "grad_norm", "seconds/step"};
  std::string line = fmt::format("[run] {} step {}:", worker, step);
  size_t shown = 0;
  for (const char* key : kFirst)
    for (const auto& [name, v] : values)
      if (name == key) line += fmt::format("{}{} {:.4g}", shown++ ? "  " : " ", name, v);
  for (size_t i = 0; shown == 0 && i < values.size() && i < 6; ++i)
    line += fmt::format("{}{} {:.4g}", i ? "  " : " ", values[i].first, values[i].second);
  return line;
}

// A run dir as the user would type it: relative to the current directory
// when it lies below it ("runs/quickstart"), else as it is.
std::string Shown(const std::string& dir) {
  std::error_code ec;
  const fs::path rel = fs::path(dir).lexically_relative(fs::current_path(ec));
  if (ec || rel.empty() || *rel.begin() == "..") return dir;
  return rel.string();
}
}  // namespace

int CmdRun(const std::string& spec_path, daemon::DaemonSettings settings) {
  log::Init(settings.log_level == "info" ? "warn" : settings.log_level);
  auto spec = LoadSpecForSubmit(spec_path);
  if (!spec.ok()) { std::cerr << "tandem: " << spec.status().message() << "\n"; return kExitFailed; }

  bool temp_state = false;
  if (settings.state_dir.empty()) {
    std::string tmpl = (fs::temp_directory_path() / "tandem-run-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) { std::perror("tandem: mkdtemp"); return kExitFailed; }
    settings.state_dir = tmpl;
    temp_state = true;
  }
  settings.socket.clear();  // run's socket is its state dir's (daemon::Resolve derives it)

  boost::asio::io_context io;
  daemon::Daemon d(io, settings);
  if (Status st = d.Start(fs::current_path() / "runs"); !st.ok()) {
    std::cerr << "tandem: cannot start the embedded daemon: " << st.message() << "\n";
    return kExitFailed;
  }
  std::cerr << "[run] embedded daemon: --socket " << d.settings().socket << "\n";

  std::string job_id, last_roles;
  int rc = kExitFailed;
  bool interrupted = false;
  auto finish = [&](int code) {
    rc = code;
    d.Stop();
    io.stop();
  };
  uint64_t token = d.jobs().Subscribe([&](const daemon::Event& ev) {
    const json& b = ev.body;
    if (job_id.empty() && b.value("type", "") == "job_submitted") {
      job_id = b["job"].value("id", "");
      std::cerr << "[run] job " << job_id << "  run dir " << Shown(b["job"].value("run_dir", "")) << "\n";
    }
    const bool mine = (b["job"].is_string() && b["job"] == job_id) ||
                      (b["job"].is_object() && b["job"].value("id", "") == job_id);
    if (job_id.empty() || !mine) return;
    std::cerr << FormatEvent(b) << "\n";
    const daemon::Job* job = d.jobs().Find(job_id);
    if (!job) return;
    if (std::string roles = RoleLine(*job); roles != last_roles) {
      std::cerr << "[run] " << roles << "\n";
      last_roles = roles;
    }
    if (b.value("type", "") == "job_state" && daemon::IsTerminal(job->state)) {
      finish(interrupted && job->state == daemon::JobState::kCancelled ? kExitCancelled
                                                                       : ExitCodeForState(std::string(daemon::ToString(job->state))));
    }
  });

  const uint64_t progress = d.worker_metrics().AddListener(
      [&](const std::string& job, const std::string& worker, std::optional<int64_t> step,
          const daemon::WorkerMetrics::Values& values) {
        if (job == job_id && step && !values.empty()) std::cerr << ProgressLine(worker, *step, values) << "\n";
      });

  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  std::function<void(const boost::system::error_code&, int)> on_signal =
      [&](const boost::system::error_code& ec, int) {
        if (ec) return;
        if (!interrupted) {
          interrupted = true;
          std::cerr << "[run] interrupted: cancelling " << job_id << " (tasks get SIGTERM, then SIGKILL after "
                    << settings.grace_s << "s)\n";
          if (!job_id.empty()) (void)d.jobs().Cancel(job_id);
          else finish(kExitCancelled);
        }
        signals.async_wait(on_signal);
      };
  signals.async_wait(on_signal);

  d.jobs().Submit(*spec, [&](StatusOr<json> result) {
    if (!result.ok()) {
      std::cerr << "tandem: job refused:\n" << result.status().message() << "\n";
      return finish(kExitFailed);
    }
  });
  io.run();
  d.jobs().Unsubscribe(token);
  d.worker_metrics().RemoveListener(progress);

  if (const daemon::Job* job = d.jobs().Find(job_id)) {
    std::cerr << "[run] job " << job->id << " " << daemon::ToString(job->state)
              << (job->detail.empty() ? "" : " (" + job->detail + ")") << "\n";
    for (const auto& t : job->tasks)
      std::cerr << "[run]   " << t.name << "  " << daemon::ToString(t.state)
                << (t.detail.empty() ? "" : "  " + t.detail) << "\n";
    const std::string run_dir = Shown(job->run_dir);
    std::cerr << "[run] logs: " << run_dir << "/tasks/\n";
    // A job with GPU handoffs ends with who held what (tandem residency RUN_DIR).
    std::optional<report::ResidencyModel> residency;
    if (fs::exists(fs::path(job->run_dir) / "residency.jsonl")) {
      if (auto logs = report::ReadRunLogs(run_dir); logs.ok()) {
        residency = report::BuildResidencyModel(*logs, report::SpecGpuMemory(run_dir));
        std::cerr << "[run] residency (tandem residency " << run_dir << "; tandem events " << run_dir
                  << " --handoff; tandem timeline " << run_dir << " -o timeline.html):\n"
                  << report::ResidencyText(*residency);
      }
    }
    // An RL job ends with what it learned (its actor's metrics.jsonl).
    const std::string metrics = run_dir + "/metrics.jsonl";
    if (auto summary = report::ReadRlSummary((fs::path(job->run_dir) / "metrics.jsonl").string()); summary.ok())
      std::cerr << "[run] " << report::RlSummaryText(*summary, metrics, residency ? &*residency : nullptr);
    std::cout << job->id << "\n";
  }
  if (temp_state) {
    std::error_code ec;
    fs::remove_all(settings.state_dir, ec);
  }
  return rc;
}

}  // namespace tandem::cli
