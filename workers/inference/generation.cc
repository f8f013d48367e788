// Validate, PauseModeName/ParsePauseMode and FinishReasonName of generation.h (the shared request types).
#include "workers/inference/generation.h"

#include <cmath>

#include <fmt/format.h>

namespace tandem::inference {

StatusOr<PauseMode> ParsePauseMode(std::string_view name) {
  if (name == "abort") return PauseMode::kAbort;
  if (name == "retract") return PauseMode::kRetract;
  if (name == "in_place") return PauseMode::kInPlace;
  return InvalidArgument("mode: expected \"abort\", \"retract\" or \"in_place\", got \"" + std::string(name) + "\"");
}

const char* PauseModeName(PauseMode mode) {
  switch (mode) {
    case PauseMode::kAbort: return "abort";
    case PauseMode::kRetract: return "retract";
    case PauseMode::kInPlace: return "in_place";
  }
  return "?";
}

Status Validate(const SamplingParams& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0)
    return InvalidArgument("temperature: must be a finite number >= 0 (0: greedy), got " +
                           fmt::format("{}", p.temperature));
  if (!(p.top_p > 0 && p.top_p <= 1))
    return InvalidArgument("top_p: must lie in (0, 1], got " + fmt::format("{}", p.top_p));
  if (p.top_k != -1 && p.top_k < 1)
    return InvalidArgument("top_k: must be -1 (all tokens) or >= 1, got " + std::to_string(p.top_k));
  if (!(p.min_p >= 0 && p.min_p <= 1))
    return InvalidArgument("min_p: must lie in [0, 1], got " + fmt::format("{}", p.min_p));
  if (p.max_new_tokens < 1)
    return InvalidArgument("max_new_tokens: must be >= 1, got " + std::to_string(p.max_new_tokens));
  if (p.n < 1) return InvalidArgument("n: must be >= 1, got " + std::to_string(p.n));
  for (size_t i = 0; i < p.stop.size(); ++i)
    if (p.stop[i].empty()) return InvalidArgument("stop[" + std::to_string(i) + "]: must not be empty");
  for (size_t i = 0; i < p.stop_token_ids.size(); ++i)
    if (p.stop_token_ids[i] < 0)
      return InvalidArgument("stop_token_ids[" + std::to_string(i) + "]: must be >= 0, got " +
                             std::to_string(p.stop_token_ids[i]));
  return Status::Ok();
}

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
  }
  return "abort";
}

}  // namespace tandem::inference
