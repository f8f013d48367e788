// Names inside a checkpoint root (see checkpoint_layout.h).
#include "workers/checkpoint/checkpoint_layout.h"

#include <fmt/format.h>

#include "workers/checkpoint/checkpoint_manifest.h"

namespace tandem::checkpoint {
namespace {

// Decimal digits only, at most 18 of them (fits any value we accept).
std::optional<uint64_t> ParseDigits(std::string_view s) {
  if (s.empty() || s.size() > 18) return std::nullopt;
  uint64_t v = 0;
  for (const char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
}

}  // namespace

std::string StepDirName(uint64_t step) { return fmt::format("step-{:08}", step); }

std::optional<uint64_t> ParseStepDirName(std::string_view name) {
  if (!name.starts_with("step-")) return std::nullopt;
  const auto step = ParseDigits(name.substr(5));
  if (!step || *step > kMaxStep || StepDirName(*step) != name) return std::nullopt;
  return step;
}

std::string TempDirName(uint64_t step, int64_t pid) { return fmt::format(".tmp-{}-{}", StepDirName(step), pid); }
std::string TrashDirName(uint64_t step, int64_t pid) { return fmt::format(".trash-{}-{}", StepDirName(step), pid); }

std::optional<ScratchDirName> ParseScratchDirName(std::string_view name) {
  if (name.starts_with(".tmp-")) name.remove_prefix(5);
  else if (name.starts_with(".trash-")) name.remove_prefix(7);
  else return std::nullopt;
  const size_t dash = name.rfind('-');
  if (dash == std::string_view::npos) return std::nullopt;
  const auto step = ParseStepDirName(name.substr(0, dash));
  const auto pid = ParseDigits(name.substr(dash + 1));
  if (!step || !pid) return std::nullopt;
  return ScratchDirName{*step, static_cast<int64_t>(*pid)};
}

}  // namespace tandem::checkpoint
