// Phase and step spans (phases.h).
#include "orchestrator/report/phases.h"

#include <algorithm>
#include <map>

namespace tandem::report {

std::vector<PhaseSpan> PhaseSpans(const std::vector<HandoffLine>& lines) {
  std::vector<PhaseSpan> spans;
  std::map<std::string, size_t> open;  // group -> index of its current span
  for (const HandoffLine& l : lines) {
    const double end = l.start + l.duration;
    const bool failed = l.outcome != "ok";
    auto it = open.find(l.group);
    if (it == open.end() || spans[it->second].phase != l.phase) {
      spans.push_back(PhaseSpan{.group = l.group, .phase = l.phase, .start = l.start, .end = end});
      open[l.group] = spans.size() - 1;
      it = open.find(l.group);
    }
    PhaseSpan& p = spans[it->second];
    p.start = std::min(p.start, l.start);
    p.end = std::max(p.end, end);
    p.commands++;
    p.failed = p.failed || failed;
    if (p.steps.empty() || p.steps.back().step != l.step) {
      p.steps.push_back(StepSpan{.step = l.step, .stage = l.stage, .start = l.start, .end = end});
    }
    StepSpan& s = p.steps.back();
    s.start = std::min(s.start, l.start);
    s.end = std::max(s.end, end);
    s.commands++;
    s.failed = s.failed || failed;
  }
  return spans;
}

std::string PhaseAt(const std::vector<PhaseSpan>& spans, double ts) {
  const PhaseSpan* best = nullptr;
  for (const PhaseSpan& p : spans) {
    if (p.start <= ts && ts <= p.end) return p.phase;
    if (p.start <= ts && (!best || p.start > best->start)) best = &p;
  }
  return best ? best->phase : "";
}

}  // namespace tandem::report
