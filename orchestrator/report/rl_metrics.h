// The series of an RL run's metrics.jsonl (docs/rl.md "Metrics"): for each
// key, the (step, value) pairs of the lines that carry it as a finite
// number, in file order. What `tandem run`'s learning table
// (rl_summary.h) and `tandem report`'s curves (rl_report_page.h) are read
// from.
//
// The actor writes the file, so reading is tolerant as run_logs.h is: a line
// that is not a JSON object with an integer "step" >= 0, over 1 MiB, or too
// deep is skipped and counted; a value that is not a finite number is
// ignored; at most kMaxKeys keys are kept (the first seen).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tandem::report {

struct RlMetrics {
  static constexpr size_t kMaxKeys = 256;
  std::map<std::string, std::vector<std::pair<int64_t, double>>> series;
  std::optional<int64_t> final_step;  // the step of the line with "final": true
  size_t skipped = 0;                 // lines not used

  // The series of `key`, empty when absent.
  const std::vector<std::pair<int64_t, double>>& Of(const std::string& key) const;
};

// NotFound when the file does not exist; other I/O errors as errors.
StatusOr<RlMetrics> ReadRlMetrics(const std::string& metrics_path);

}  // namespace tandem::report
