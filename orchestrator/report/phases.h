// Phase and step spans inferred from handoff.jsonl (docs/handoff.md
// "Reading the logs"). The log has one line per command; a phase span is a
// run of consecutive lines of one group with the same phase (lines of other
// groups in between do not break it), from the earliest start to the latest
// start + duration. Within it, a step span is a run of lines with the same
// step. The timeline page computes the same spans in its own JavaScript
// (timeline_page.cc); tests compare the two.
#pragma once

#include <string>
#include <vector>

#include "orchestrator/report/run_logs.h"

namespace tandem::report {

struct StepSpan {
  int step = 0;
  std::string stage;
  double start = 0;
  double end = 0;
  size_t commands = 0;  // lines
  bool failed = false;  // some line's outcome is not "ok"
};

struct PhaseSpan {
  std::string group;
  std::string phase;
  double start = 0;
  double end = 0;
  size_t commands = 0;
  bool failed = false;
  std::vector<StepSpan> steps;
};

// In the order their first line appears.
std::vector<PhaseSpan> PhaseSpans(const std::vector<HandoffLine>& lines);

// The phase whose transition covers `ts`, else the last one that started
// before it ("TRAIN" or "after TRAIN" is not distinguished); "" when none.
std::string PhaseAt(const std::vector<PhaseSpan>& spans, double ts);

}  // namespace tandem::report
