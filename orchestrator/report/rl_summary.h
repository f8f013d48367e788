// The summary of an RL run's metrics.jsonl (docs/rl.md "Metrics"), which
// `tandem run` prints when a job whose actor wrote one ends: held-out
// accuracy before and after, the sampled reward of the first and the last
// steps, seconds per phase, tree packing, and the residency peak per GPU.
//
// Read through rl_metrics.h (tolerant of what a task may write there).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"
#include "orchestrator/report/residency_model.h"
#include "orchestrator/report/rl_metrics.h"

namespace tandem::report {

struct RlSummary {
  int64_t steps = 0;                      // lines with a step >= 1 and a reward/mean
  std::optional<double> accuracy_before;  // eval/accuracy of step 0
  std::optional<double> accuracy_after;   // of the "final" line, else the last eval after step 0
  std::optional<int64_t> eval_problems;   // eval/problems, when the actor wrote it
  int64_t reward_window = 0;              // steps averaged at each end: min(10, ceil(steps / 2))
  double reward_first = 0, reward_last = 0;
  // Means per step of seconds/rollout, /train, /sync, /step; total: their sum of seconds/step.
  double rollout_s = 0, train_s = 0, sync_s = 0, step_s = 0, total_s = 0;
  int64_t tokens_packed = 0, tokens_sequence = 0;  // sums of tokens/packed and tokens/sequence
  size_t skipped = 0;                              // lines not used
};

RlSummary SummarizeRl(const RlMetrics& metrics);
// ReadRlMetrics then SummarizeRl: NotFound when the file does not exist.
StatusOr<RlSummary> ReadRlSummary(const std::string& metrics_path);

// The table `tandem run` prints; `residency` adds the peak per GPU.
std::string RlSummaryText(const RlSummary& s, const std::string& metrics_path, const ResidencyModel* residency);

}  // namespace tandem::report
