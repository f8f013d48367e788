// tandem: the command-line interface. Subcommands and exit codes: docs/cli.md.
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <fstream>

#include "common/log.h"
#include "common/version.h"
#include "orchestrator/cli/commands.h"
#include "orchestrator/daemon/daemon.h"

#include <boost/asio/signal_set.hpp>

namespace {

using namespace tandem;

int RunDaemon(daemon::DaemonSettings settings) {
  log::Init(settings.log_level);
  boost::asio::io_context io;
  daemon::Daemon d(io, settings);
  if (Status st = d.Start(); !st.ok()) {
    log::Error("daemon", "cannot start: {}", st.ToString());
    return 1;
  }
  boost::asio::signal_set signals(io, SIGTERM, SIGINT);
  signals.async_wait([&](const boost::system::error_code&, int) { d.Stop(); io.stop(); });
  io.run();
  return 0;
}

// `events`, `residency` and `timeline` take one JOB or RUN_DIR. A shell glob
// such as runs/quickstart-* that matched several run dirs is refused with
// what it matched, not CLI11's "arguments were not expected".
bool OneTarget(const std::string& command, const std::vector<std::string>& targets, std::string& out) {
  if (targets.size() == 1) {
    out = targets[0];
    return true;
  }
  std::cerr << "tandem " << command << ": expected one JOB or RUN_DIR, got " << targets.size() << ":";
  for (const auto& t : targets) std::cerr << " " << t;
  std::cerr << "\n(a glob that matched several run dirs? name one of them)\n";
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  std::signal(SIGPIPE, SIG_IGN);
  CLI::App app{"tandem: run and inspect RL post-training jobs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", VersionLine("tandem"));
  std::string socket, url, token_file;
  app.add_option("--socket", socket, "tandemd's unix socket (default: TANDEM_SOCKET, else <state-dir>/tandemd.sock)")
      ->envname("TANDEM_SOCKET");
  app.add_option("--url", url, "tandemd over TCP, HOST:PORT (with --token-file)")->envname("TANDEM_URL");
  app.add_option("--token-file", token_file, "Bearer token file for --url")->envname("TANDEM_TOKEN_FILE");
  app.fallthrough();  // global options are accepted after the subcommand too

  std::string spec, job, task;
  std::vector<std::string> targets;  // JOB|RUN_DIR of events, residency, timeline, report
  bool wait = false, as_json = false, follow = false, err_stream = false;

  auto* run = app.add_subcommand("run", "Run a job on an embedded daemon; exits with the job's outcome");
  run->add_option("SPEC", spec, "Job spec (JSON)")->required();
  daemon::DaemonSettings run_settings;
  daemon::AddDaemonFlags(*run, run_settings, /*include_socket=*/false);

  auto* submit = app.add_subcommand("submit", "Submit a job; prints its id on the last line");
  submit->add_option("SPEC", spec, "Job spec (JSON)")->required();
  submit->add_flag("--wait", wait, "Wait for the job to end; exit with its outcome");

  auto* status = app.add_subcommand("status", "List jobs, or show one job and its tasks");
  status->add_option("JOB", job, "Job id");
  status->add_flag("--json", as_json, "Print the API's JSON");

  auto* cancel = app.add_subcommand("cancel", "Cancel a job (SIGTERM, grace period, SIGKILL)");
  cancel->add_option("JOB", job, "Job id")->required();

  std::string phase, group;
  int64_t version = 0;
  auto* phase_cmd = app.add_subcommand("phase", "Run a GPU handoff: move the job's colocation group into a phase");
  phase_cmd->add_option("JOB", job, "Job id")->required();
  phase_cmd->add_option("PHASE", phase, "rollout, train, sync (with --version), teacher or teacher:ROLE")->required();
  phase_cmd->add_option("--version", version, "Weights version, for sync");
  phase_cmd->add_option("--group", group, "The colocation group (its owner role); needed when the job has several");

  auto* logs = app.add_subcommand("logs", "Print a task's output");
  logs->add_option("JOB", job, "Job id")->required();
  logs->add_option("--task,-t", task, "Task name (role.rank); optional for one-task jobs");
  logs->add_flag("--follow,-f", follow, "Keep printing until the task ends");
  logs->add_flag("--stderr", err_stream, "Print stderr instead of stdout");

  auto* events = app.add_subcommand("events", "Print a job's state changes, or with --handoff its handoff log");
  events->add_option("JOB", targets, "Job id or run directory")->required();
  auto* follow_flag = events->add_flag("--follow,-f", follow, "Keep printing until the job ends");
  bool handoff = false;
  events->add_flag("--handoff", handoff, "Print handoff.jsonl: one line per command")->excludes(follow_flag);

  auto* residency = app.add_subcommand("residency", "Per GPU: who holds what memory now, the peak, leaks");
  residency->add_option("JOB", targets, "Job id or run directory")->required();
  residency->add_flag("--json", as_json, "Print the model as JSON");

  auto* timeline = app.add_subcommand("timeline", "Write an HTML page drawing who held which GPU's memory over time");
  timeline->add_option("JOB", targets, "Job id or run directory")->required();
  std::string timeline_out = "timeline.html";
  size_t max_bars = 0;
  timeline->add_option("-o,--output", timeline_out, "Output file (default timeline.html)");
  timeline->add_option("--max-bars", max_bars, "Bars drawn before holds are merged (default 4000)");

  auto* report_cmd = app.add_subcommand("report", "Write an HTML page drawing an RL run's curves (its metrics.jsonl)");
  report_cmd->add_option("JOB", targets, "Job id or run directory")->required();
  std::string report_out = "report.html";
  report_cmd->add_option("-o,--output", report_out, "Output file (default report.html)");
  auto* validate = app.add_subcommand("validate", "Check a job spec; exit 0 if valid, 1 with the errors");
  validate->add_option("SPEC", spec, "Job spec (JSON)")->required();

  auto* daemon_cmd = app.add_subcommand("daemon", "Run tandemd in the foreground");
  daemon::DaemonSettings daemon_settings;
  daemon::AddDaemonFlags(*daemon_cmd, daemon_settings, /*include_socket=*/false);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : cli::kExitUsage;
  }
  log::Init("warn");
  for (CLI::App* sub : {events, residency, timeline, report_cmd}) {
    if (*sub && !OneTarget(sub->get_name(), targets, job)) return cli::kExitUsage;
  }

  if (*validate) return cli::CmdValidate(spec);
  if (*run) return cli::CmdRun(spec, run_settings);
  if (*daemon_cmd) {
    daemon_settings.socket = socket;
    return RunDaemon(daemon_settings);
  }

  cli::Endpoint ep;
  if (!url.empty()) {
    const size_t colon = url.rfind(':');
    if (colon == std::string::npos) { std::cerr << "tandem: --url must be HOST:PORT\n"; return cli::kExitUsage; }
    ep.host = url.substr(0, colon);
    ep.port = std::atoi(url.c_str() + colon + 1);
    if (!token_file.empty()) {
      std::ifstream in(token_file);
      std::getline(in, ep.token);
      while (!ep.token.empty() && std::isspace(static_cast<unsigned char>(ep.token.back()))) ep.token.pop_back();
    }
  } else {
    ep.unix_path = socket.empty() ? daemon::DefaultStateDir() + "/tandemd.sock" : socket;
  }
  cli::Client client(ep);
  if (*submit) return cli::CmdSubmit(client, spec, wait);
  if (*status) return cli::CmdStatus(client, job, as_json);
  if (*cancel) return cli::CmdCancel(client, job);
  if (*phase_cmd) return cli::CmdPhase(client, job, phase, version, group);
  if (*logs) return cli::CmdLogs(client, job, task, follow, err_stream);
  if (*events && handoff) return cli::CmdHandoffEvents(client, job);
  if (*events) return cli::CmdEvents(client, job, follow);
  if (*residency) return cli::CmdResidency(client, job, as_json);
  if (*timeline) return cli::CmdTimeline(client, job, timeline_out, max_bars);
  if (*report_cmd) return cli::CmdReport(client, job, report_out);
  return cli::kExitUsage;
}
