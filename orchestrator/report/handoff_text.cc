// The handoff log as text (handoff_text.h).
#include "orchestrator/report/handoff_text.h"

#include <map>

#include <fmt/format.h>

#include "orchestrator/report/human_units.h"
#include "orchestrator/report/phases.h"

namespace tandem::report {

std::string HandoffLineText(const HandoffLine& l) {
  std::string command = l.command;
  if (l.version) command += fmt::format(" v{}", *l.version);
  std::string line = fmt::format("{}  {:<10} {:>2} {:<17}  {:<12} {:<18} {:<11} {:>9}  {:>8}  {}",
                                 ClockTime(l.start), l.phase, l.step, l.stage, fmt::format("{}/{}", l.role, l.rank),
                                 command, l.tag.empty() ? "-" : l.tag, l.tag.empty() ? "-" : HumanBytes(l.bytes),
                                 HumanDuration(l.duration), l.outcome);
  if (!l.message.empty()) line += "  " + l.message;
  return line;
}

std::string HandoffLogText(const RunLogs& logs) {
  if (logs.handoff.empty()) return "(no handoff lines in " + logs.run_dir + "/handoff.jsonl)\n";
  const std::vector<PhaseSpan> spans = PhaseSpans(logs.handoff);
  std::string out = fmt::format("{:<12}  {:<10} {:>2} {:<17}  {:<12} {:<18} {:<11} {:>9}  {:>8}  {}\n", "TIME",
                                "PHASE", "ST", "STAGE", "WORKER", "COMMAND", "TAG", "BYTES", "DURATION", "OUTCOME");
  // Headers: a line opens a new span when its group's phase changes (phases.h).
  std::map<std::string, std::string> current;  // group -> phase
  size_t next_span = 0;
  for (const HandoffLine& l : logs.handoff) {
    auto it = current.find(l.group);
    if (it == current.end() || it->second != l.phase) {
      current[l.group] = l.phase;
      if (next_span < spans.size()) {
        const PhaseSpan& s = spans[next_span++];
        out += fmt::format("== group {}: {}  {} .. {}  ({}, {} commands{})\n", s.group, s.phase, ClockTime(s.start),
                           ClockTime(s.end), HumanDuration(s.end - s.start), s.commands,
                           s.failed ? ", FAILED" : "");
      }
    }
    out += HandoffLineText(l) + "\n";
  }
  return out;
}

}  // namespace tandem::report
