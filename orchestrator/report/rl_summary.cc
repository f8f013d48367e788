// The summary of an RL run's metrics.jsonl (rl_summary.h).
#include "orchestrator/report/rl_summary.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/bounded_json.h"
#include "orchestrator/report/bounded_lines.h"
#include "orchestrator/report/human_units.h"

namespace tandem::report {
namespace {

using json = nlohmann::json;

std::optional<double> Number(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  return std::isfinite(v) ? std::optional<double>(v) : std::nullopt;
}

std::optional<int64_t> Integer(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int64_t>();
}

// "851.2k", "2.74M".
std::string Count(int64_t n) {
  if (n >= 1'000'000) return fmt::format("{:.2f}M", static_cast<double>(n) / 1e6);
  if (n >= 1'000) return fmt::format("{:.1f}k", static_cast<double>(n) / 1e3);
  return std::to_string(n);
}

}  // namespace

StatusOr<RlSummary> ReadRlSummary(const std::string& metrics_path) {
  std::error_code ec;
  if (!std::filesystem::exists(metrics_path, ec)) return NotFound(metrics_path + ": no such file");
  std::ifstream in(metrics_path, std::ios::binary);
  if (!in) return ErrnoStatus("open " + metrics_path);
  RlSummary s;
  std::vector<double> rewards;
  double rollout = 0, train = 0, sync = 0, step = 0;
  std::optional<double> last_eval;
  std::string text;
  bool too_long = false;
  while (ReadBoundedLine(in, text, too_long)) {
    if (text.empty()) continue;
    StatusOr<json> j = too_long ? StatusOr<json>(InvalidArgument("too long")) : ParseJsonBounded(text);
    if (!j.ok() || !j->is_object()) {
      ++s.skipped;
      continue;
    }
    const std::optional<int64_t> n = Integer(*j, "step");
    if (!n || *n < 0) {
      ++s.skipped;
      continue;
    }
    if (std::optional<double> acc = Number(*j, "eval/accuracy")) {
      if (*n == 0 && !s.accuracy_before) s.accuracy_before = acc;
      if (*n > 0) last_eval = acc;
      if (*n > 0 && j->value("final", false) == true) s.accuracy_after = acc;
      if (std::optional<int64_t> p = Integer(*j, "eval/problems"); p && *p >= 0) s.eval_problems = p;
    }
    const std::optional<double> reward = Number(*j, "reward/mean");
    if (*n < 1 || !reward) continue;
    ++s.steps;
    rewards.push_back(*reward);
    rollout += Number(*j, "seconds/rollout").value_or(0);
    train += Number(*j, "seconds/train").value_or(0);
    sync += Number(*j, "seconds/sync").value_or(0);
    step += Number(*j, "seconds/step").value_or(0);
    const std::optional<int64_t> packed = Integer(*j, "tokens/packed"), sequence = Integer(*j, "tokens/sequence");
    if (packed && sequence && *packed >= 0 && *sequence >= 0 && *packed <= (int64_t{1} << 50) &&
        *sequence <= (int64_t{1} << 50)) {
      s.tokens_packed += *packed;
      s.tokens_sequence += *sequence;
    }
  }
  if (in.bad()) return ErrnoStatus("read " + metrics_path);
  if (!s.accuracy_after) s.accuracy_after = last_eval;
  if (s.steps > 0) {
    const double n = static_cast<double>(s.steps);
    s.rollout_s = rollout / n;
    s.train_s = train / n;
    s.sync_s = sync / n;
    s.step_s = step / n;
    s.total_s = step;
    s.reward_window = std::min<int64_t>(10, (s.steps + 1) / 2);
    const auto w = static_cast<std::ptrdiff_t>(s.reward_window);
    double first = 0, last = 0;
    for (std::ptrdiff_t i = 0; i < w; ++i) {
      first += rewards[static_cast<size_t>(i)];
      last += rewards[rewards.size() - 1 - static_cast<size_t>(i)];
    }
    s.reward_first = first / static_cast<double>(w);
    s.reward_last = last / static_cast<double>(w);
  }
  return s;
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
