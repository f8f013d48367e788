// The summary of an RL run's metrics.jsonl (rl_summary.h).
#include "orchestrator/report/rl_summary.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "orchestrator/report/human_units.h"

namespace tandem::report {
namespace {

// "851.2k", "2.74M".
std::string Count(int64_t n) {
  if (n >= 1'000'000) return fmt::format("{:.2f}M", static_cast<double>(n) / 1e6);
  if (n >= 1'000) return fmt::format("{:.1f}k", static_cast<double>(n) / 1e3);
  return std::to_string(n);
}

}  // namespace

RlSummary SummarizeRl(const RlMetrics& m) {
  RlSummary s;
  s.skipped = m.skipped;
  auto from_step_1 = [&](const std::string& key) {
    std::vector<double> out;
    for (const auto& [step, v] : m.Of(key))
      if (step >= 1) out.push_back(v);
    return out;
  };
  for (const auto& [step, v] : m.Of("eval/accuracy")) {
    if (step == 0 && !s.accuracy_before) s.accuracy_before = v;
    if (step > 0) s.accuracy_after = v;  // the last eval after step 0, unless a final line says otherwise
  }
  if (m.final_step) {
    for (const auto& [step, v] : m.Of("eval/accuracy"))
      if (step == *m.final_step) s.accuracy_after = v;
  }
  for (const auto& [step, v] : m.Of("eval/problems"))
    if (v >= 0 && v <= 1e15 && v == std::floor(v)) s.eval_problems = static_cast<int64_t>(v);
  const std::vector<double> rewards = from_step_1("reward/mean");
  s.steps = static_cast<int64_t>(rewards.size());
  auto sum = [&](const std::string& key) {
    double total = 0;
    for (const double v : from_step_1(key)) total += v;
    return total;
  };
  auto count = [&](const std::string& key) {
    int64_t total = 0;
    for (const double v : from_step_1(key))
      if (v >= 0 && v <= 1e15) total += static_cast<int64_t>(v);
    return total;
  };
  s.tokens_packed = count("tokens/packed");
  s.tokens_sequence = count("tokens/sequence");
  if (s.steps == 0) return s;
  const double n = static_cast<double>(s.steps);
  s.rollout_s = sum("seconds/rollout") / n;
  s.train_s = sum("seconds/train") / n;
  s.sync_s = sum("seconds/sync") / n;
  s.total_s = sum("seconds/step");
  s.step_s = s.total_s / n;
  s.reward_window = std::min<int64_t>(10, (s.steps + 1) / 2);
  const size_t w = static_cast<size_t>(s.reward_window);
  double first = 0, last = 0;
  for (size_t i = 0; i < w; ++i) {
    first += rewards[i];
    last += rewards[rewards.size() - 1 - i];
  }
  s.reward_first = first / static_cast<double>(w);
  s.reward_last = last / static_cast<double>(w);
  return s;
}

StatusOr<RlSummary> ReadRlSummary(const std::string& metrics_path) {
  TANDEM_ASSIGN_OR_RETURN(const RlMetrics m, ReadRlMetrics(metrics_path));
  return SummarizeRl(m);
}

std::string RlSummaryText(const RlSummary& s, const std::string& metrics_path, const ResidencyModel* residency) {
  std::string out = fmt::format("learning ({}: {} steps in {}):\n", metrics_path, s.steps, HumanDuration(s.total_s));
  out += "  WHAT               BEFORE  AFTER\n";
  auto pct = [](std::optional<double> v) { return v ? fmt::format("{:.1f}%", 100 * *v) : std::string("-"); };
  std::string acc = fmt::format("  held-out accuracy  {:<6}  {:<6}", pct(s.accuracy_before), pct(s.accuracy_after));
  if (s.accuracy_before && s.accuracy_after)
    acc += fmt::format("  {:+.1f} points (greedy{})", 100 * (*s.accuracy_after - *s.accuracy_before),
                       s.eval_problems ? fmt::format(", {} problems", *s.eval_problems) : std::string());
  out += acc + "\n";
  if (s.steps > 0) {
    out += fmt::format("  sampled reward     {:<6.3f}  {:<6.3f}  mean of the first and the last {} steps\n", s.reward_first,
                       s.reward_last, s.reward_window);
    const double other = std::max(0.0, s.step_s - s.rollout_s - s.train_s - s.sync_s);
    out += fmt::format("  time per step      {:.2f} s: rollout {:.2f} s, train {:.2f} s, sync {:.2f} s, other {:.2f} s\n",
                       s.step_s, s.rollout_s, s.train_s, s.sync_s, other);
  }
  if (s.tokens_packed > 0 && s.tokens_sequence > 0)
    out += fmt::format("  tree packing       {} of {} tokens computed ({:.2f}x fewer)\n", Count(s.tokens_packed),
                       Count(s.tokens_sequence), static_cast<double>(s.tokens_sequence) / static_cast<double>(s.tokens_packed));
  if (residency && !residency->gpus.empty()) {
    std::string peaks;
    for (const GpuResidency& g : residency->gpus) {
      if (!peaks.empty()) peaks += ", ";
      peaks += fmt::format("GPU {} {}{}", g.gpu, HumanBytes(g.peak_bytes),
                           g.peak_phase.empty() ? std::string() : " (" + g.peak_phase + ")");
      if (g.capacity) peaks += " of " + HumanBytes(*g.capacity);
    }
    out += "  residency peak     " + peaks + "\n";
  }
  if (s.skipped > 0) out += fmt::format("  ({} lines of {} skipped: not metrics)\n", s.skipped, metrics_path);
  return out;
}

}  // namespace tandem::report
