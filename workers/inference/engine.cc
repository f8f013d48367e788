// The names of engine.h's pause modes.
#include "workers/inference/engine.h"

namespace tandem::inference {

const char* PauseModeName(PauseMode mode) {
  switch (mode) {
    case PauseMode::kAbort: return "abort";
    case PauseMode::kRetract: return "retract";
    case PauseMode::kInPlace: return "in_place";
  }
  return "abort";
}

std::optional<PauseMode> ParsePauseMode(std::string_view name) {
  if (name == "abort") return PauseMode::kAbort;
  if (name == "retract") return PauseMode::kRetract;
  if (name == "in_place") return PauseMode::kInPlace;
  return std::nullopt;
}

}  // namespace tandem::inference
