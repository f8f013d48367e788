// `tandem report`: one self-contained HTML page (inline CSS and SVG; no
// script, nothing fetched) that draws an RL run's curves from its
// metrics.jsonl (rl_metrics.h; docs/cli.md "tandem report"): held-out
// accuracy and sampled reward, seconds per phase, KL to the reference and
// entropy, gradient norm, response length (y from 0, or from the series'
// minimum when below); the learning table
// (rl_summary.h) above them. A chart is drawn for each group with at least
// one of its series; each series is an SVG <polyline class="series"
// data-key="KEY" data-points="N"> over the steps (x) and the group's value
// range (y), its points the first kMaxPoints of the series.
#pragma once

#include <cstddef>
#include <string>

#include "orchestrator/report/rl_metrics.h"

namespace tandem::report {

inline constexpr size_t kMaxReportPoints = 100000;

// `title` names the run (its directory) on the page.
std::string RlReportHtml(const RlMetrics& metrics, const std::string& title);

}  // namespace tandem::report
