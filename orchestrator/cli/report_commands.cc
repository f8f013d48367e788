// `tandem residency`, `tandem timeline`, `tandem report` and `tandem events --handoff`
// (issue #3 part 6; docs/cli.md "Reading a run's handoff"). Each takes a run
// directory, read directly, or a job id: the daemon is asked for the job
// (GET /v1/jobs/{id}) and its `run_dir` is read on this host, so a job of a
// tandemd on another machine (--url) needs its run dir reachable here.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "orchestrator/cli/commands.h"
#include "orchestrator/report/handoff_text.h"
#include "orchestrator/report/residency_model.h"
#include "orchestrator/report/rl_report_page.h"
#include "orchestrator/report/run_logs.h"
#include "orchestrator/report/timeline.h"

namespace tandem::cli {
namespace {

namespace fs = std::filesystem;

// The run dir of JOB|RUN_DIR, or the exit code to return.
struct RunDir {
  std::string path;
  int rc = kExitOk;
};

RunDir ResolveRunDir(Client& c, const std::string& target) {
  std::error_code ec;
  if (fs::is_directory(target, ec)) return {target, kExitOk};
  auto r = c.Request("GET", "/v1/jobs/" + target);
  if (!r.ok()) {
    std::cerr << "tandem: " << target << " is not a run directory, and tandemd cannot be reached to look it up as a job: "
              << r.status().message() << "\n";
    return {"", kExitUnreachable};
  }
  if (r->status != 200) {
    std::cerr << "tandem: " << target << " is not a run directory; tandemd: " << ErrorText(*r) << "\n";
    return {"", kExitRefused};
  }
  const std::string dir = r->Json().value("run_dir", "");
  if (dir.empty() || !fs::is_directory(dir, ec)) {
    std::cerr << "tandem: job " << target << ": its run dir " << (dir.empty() ? "(none)" : dir)
              << " is not readable on this host\n";
    return {"", kExitFailed};
  }
  return {dir, kExitOk};
}

// Reads the logs, printing skipped-line warnings to stderr; nullopt (after
// printing why) when there are none to read.
std::optional<report::RunLogs> Load(const std::string& dir) {
  auto logs = report::ReadRunLogs(dir);
  if (!logs.ok()) {
    std::cerr << "tandem: " << logs.status().message() << "\n";
    return std::nullopt;
  }
  const std::string warnings = report::WarningsText(*logs);
  if (!warnings.empty()) std::cerr << "tandem: warning: " << warnings;
  return std::move(*logs);
}

// Writes `page` to out_path through a temporary file and a rename; false
// (said on stderr) when it cannot.
bool WritePage(const std::string& out_path, const std::string& page) {
  const std::string tmp = out_path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << page;
    if (!out.flush()) {
      std::cerr << "tandem: cannot write " << tmp << "\n";
      return false;
    }
  }
  std::error_code ec;
  fs::rename(tmp, out_path, ec);
  if (ec) {
    std::cerr << "tandem: cannot write " << out_path << ": " << ec.message() << "\n";
    return false;
  }
  return true;
}

}  // namespace

int CmdResidency(Client& c, const std::string& target, bool as_json) {
  RunDir rd = ResolveRunDir(c, target);
  if (rd.rc != kExitOk) return rd.rc;
  auto logs = Load(rd.path);
  if (!logs) return kExitFailed;
  report::ResidencyModel m = report::BuildResidencyModel(*logs, report::SpecGpuMemory(rd.path));
  if (as_json) {
    std::cout << report::ResidencyJson(m).dump(2) << "\n";
  } else {
    std::cout << report::ResidencyText(m);
  }
  return kExitOk;
}

int CmdTimeline(Client& c, const std::string& target, const std::string& out_path, size_t max_bars) {
  RunDir rd = ResolveRunDir(c, target);
  if (rd.rc != kExitOk) return rd.rc;
  auto logs = Load(rd.path);
  if (!logs) return kExitFailed;
  report::TimelineOptions opts;
  if (max_bars > 0) opts.max_bars = max_bars;
  if (!WritePage(out_path, report::TimelineHtml(*logs, opts))) return kExitFailed;
  std::cout << "wrote " << out_path << " (" << logs->residency.size() << " residency lines, " << logs->handoff.size()
            << " handoff lines)\n";
  return kExitOk;
}

int CmdReport(Client& c, const std::string& target, const std::string& out_path) {
  RunDir rd = ResolveRunDir(c, target);
  if (rd.rc != kExitOk) return rd.rc;
  const std::string path = (fs::path(rd.path) / "metrics.jsonl").string();
  StatusOr<report::RlMetrics> m = report::ReadRlMetrics(path);
  if (!m.ok()) {
    std::cerr << "tandem: " << m.status().message()
              << (m.status().code() == StatusCode::kNotFound ? " (an actor writes it: docs/rl.md \"Metrics\")" : "") << "\n";
    return kExitFailed;
  }
  if (!WritePage(out_path, report::RlReportHtml(*m, rd.path))) return kExitFailed;
  std::cout << "wrote " << out_path << " (" << m->Of("reward/mean").size() << " steps, " << m->series.size()
            << " metrics" << (m->skipped ? ", " + std::to_string(m->skipped) + " lines skipped" : "") << ")\n";
  return kExitOk;
}

int CmdHandoffEvents(Client& c, const std::string& target) {
  RunDir rd = ResolveRunDir(c, target);
  if (rd.rc != kExitOk) return rd.rc;
  auto logs = Load(rd.path);
  if (!logs) return kExitFailed;
  if (!logs->has_handoff) {
    std::cerr << "tandem: " << rd.path << ": no handoff.jsonl\n";
    return kExitFailed;
  }
  std::cout << report::HandoffLogText(*logs);
  return kExitOk;
}

}  // namespace tandem::cli
