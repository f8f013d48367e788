// `tandem timeline`: one self-contained HTML page (inline CSS, JavaScript and
// SVG; nothing fetched) that draws who held which GPU's memory over time
// (docs/handoff.md "Reading the logs"; docs/cli.md "tandem timeline").
//
// The page embeds the run's log lines (TimelineData) and draws them with its
// own JavaScript (timeline_page.cc): a lane per logical GPU with a row per
// (role/rank, tag); a bar per hold (a tag resident on a GPU from when it
// became resident, or changed size, until it was released or changed size;
// still-held tags reach the end of the log); phases and handoff steps
// (phases.h) in bands above; leaks and failed commands in red. Every drawn
// mark is an SVG <rect> whose data-* attributes carry what it stands for:
//   bar:   class="bar"   data-gpu data-group data-role data-rank data-tag data-bytes
//                        data-start data-end data-leak(0|1) data-open(0|1) data-merged(N holds)
//   phase: class="phase" data-group data-phase data-start data-end data-commands data-failed data-merged
//   step:  class="step"  data-group data-phase data-step data-stage data-start data-end
//   leak:  class="leak"  data-gpu data-ts data-role data-rank data-tag
//   fault: class="fault" data-group data-ts data-outcome
// Large logs: past `max_bars` holds in view, the holds of one row that start
// in the same slice of a few pixels become one bar (data-merged > 1, shaded
// by the share of its span they were held); past `max_marks` phases, the
// same per group; past `max_marks` steps, leak or fault marks, the rest is
// not drawn. The page says which in a note (<p class="note"
// data-kind="aggregated|truncated">). A from/to window (or a click on a
// phase) zooms in; the limits apply to what is in view.
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "orchestrator/report/run_logs.h"

namespace tandem::report {

struct TimelineOptions {
  size_t max_bars = 4000;   // bars drawn at once before merging
  size_t max_marks = 5000;  // phases, steps, leak and fault marks each
};

// What the page embeds: {"v":1, "run_dir", "limits", "strings": [...],
// "residency": [[ts, group, role, rank, gpus, tag, bytes, leak, note, devices]],
// "handoff": [[start, duration, group, phase, step, stage, role, rank, gpus,
// command, tag, bytes, outcome, message, version]], "skipped", "warnings"}; string
// fields are indices into "strings" (null when absent), rows in file order.
nlohmann::json TimelineData(const RunLogs& logs, const TimelineOptions& o = {});

// The whole page.
std::string TimelineHtml(const RunLogs& logs, const TimelineOptions& o = {});

// The page around the data (timeline_page.cc).
extern const char* const kTimelinePageHead;
extern const char* const kTimelinePageTail;

}  // namespace tandem::report
