// The series of an RL run's metrics.jsonl (rl_metrics.h).
#include "orchestrator/report/rl_metrics.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/bounded_json.h"
#include "common/task_file.h"
#include "orchestrator/report/bounded_lines.h"

namespace tandem::report {

const std::vector<std::pair<int64_t, double>>& RlMetrics::Of(const std::string& key) const {
  static const std::vector<std::pair<int64_t, double>> kNone;
  auto it = series.find(key);
  return it == series.end() ? kNone : it->second;
}

StatusOr<RlMetrics> ReadRlMetrics(const std::string& metrics_path) {
  // The actor writes this file; any task could have replaced it (common/task_file.h).
  TANDEM_ASSIGN_OR_RETURN(std::ifstream in, OpenTaskStream(metrics_path), "");
  RlMetrics m;
  std::string text;
  bool too_long = false;
  while (ReadBoundedLine(in, text, too_long)) {
    if (text.empty()) continue;
    StatusOr<nlohmann::json> j = too_long ? StatusOr<nlohmann::json>(InvalidArgument("too long")) : ParseJsonBounded(text);
    const nlohmann::json* step = j.ok() && j->is_object() ? &(*j)["step"] : nullptr;
    if (!step || !step->is_number_integer() || step->get<int64_t>() < 0) {
      ++m.skipped;
      continue;
    }
    const int64_t n = step->get<int64_t>();
    for (const auto& [key, value] : j->items()) {
      if (key == "step" || !value.is_number()) continue;
      const double v = value.get<double>();
      if (!std::isfinite(v)) continue;
      auto it = m.series.find(key);
      if (it == m.series.end()) {
        if (m.series.size() >= RlMetrics::kMaxKeys) continue;
        it = m.series.emplace(key, std::vector<std::pair<int64_t, double>>{}).first;
      }
      it->second.emplace_back(n, v);
    }
    const auto final_it = j->find("final");
    if (n > 0 && final_it != j->end() && final_it->is_boolean() && final_it->get<bool>()) m.final_step = n;
  }
  if (in.bad()) return ErrnoStatus("read " + metrics_path);
  return m;
}

}  // namespace tandem::report
