// The `tandem` subcommands (issue #2 part 7). Each returns the process exit
// code, documented in docs/cli.md:
//   0  success (the job succeeded, the request was done)
//   1  the job failed, or the spec is invalid
//   2  usage error (bad flags)
//   3  tandemd cannot be reached
//   4  the job was cancelled (also `tandem run` after Ctrl-C)
//   5  the daemon refused the request (not found, conflict, ...)
#pragma once

#include <string>

#include "orchestrator/cli/client.h"
#include "orchestrator/daemon/settings.h"

namespace tandem::cli {

enum ExitCode { kExitOk = 0, kExitFailed = 1, kExitUsage = 2, kExitUnreachable = 3,
                kExitCancelled = 4, kExitRefused = 5 };

// Reads a spec file and makes a relative run_dir absolute against the cwd,
// since the daemon cannot know the submitter's cwd.
StatusOr<nlohmann::ordered_json> LoadSpecForSubmit(const std::string& path);

int CmdValidate(const std::string& spec_path);
int CmdSubmit(Client& c, const std::string& spec_path, bool wait);
int CmdStatus(Client& c, const std::string& job, bool json);
int CmdCancel(Client& c, const std::string& job);
// POST /v1/jobs/{id}/phase: runs a handoff of the job's group and waits for it.
int CmdPhase(Client& c, const std::string& job, const std::string& phase, int64_t version, const std::string& group);
int CmdLogs(Client& c, const std::string& job, const std::string& task, bool follow, bool stderr_stream);
int CmdEvents(Client& c, const std::string& job, bool follow);
// Follows a job's events until it ends; prints per-role progress; returns the job's exit code.
int WaitForJob(Client& c, const std::string& job, bool quiet);
int CmdRun(const std::string& spec_path, daemon::DaemonSettings settings);

// Reading a run's handoff (report_commands.cc). `target` is a run directory
// or a job id (the daemon tells its run_dir). Exit 1 when the run dir has no
// handoff.jsonl / residency.jsonl; skipped log lines are warnings on stderr.
int CmdResidency(Client& c, const std::string& target, bool json);
// Writes the timeline page to `out_path` (via a temporary file and rename).
// `max_bars` > 0 overrides the page's bar limit.
int CmdTimeline(Client& c, const std::string& target, const std::string& out_path, size_t max_bars);
// The RL curves of RUN_DIR/metrics.jsonl as one HTML page (rl_report_page.h).
int CmdReport(Client& c, const std::string& target, const std::string& out_path);
// `tandem events JOB|RUN_DIR --handoff`: handoff.jsonl, one line per command.
int CmdHandoffEvents(Client& c, const std::string& target);

// Exit code for a job's final state name.
int ExitCodeForState(const std::string& state);
// One line of a job event, for people: "12:00:01.234 actor.0 running pid=123".
std::string FormatEvent(const nlohmann::json& ev);

}  // namespace tandem::cli
