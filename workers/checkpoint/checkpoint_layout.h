// The names inside a checkpoint root (docs/weights.md "Checkpoints"):
//
//   <root>/step-00000015/                 a committed checkpoint (its manifest.json says step 15)
//   <root>/.tmp-step-00000016-<pid>/      being written by process <pid>, or left by a killed one
//   <root>/.trash-step-00000013-<pid>/    being deleted by process <pid> (rotation, replacement)
//
// Step numbers are zero-padded to 8 digits (more digits past 99,999,999),
// so `ls` sorts them; only the canonical spelling counts as a checkpoint
// ("step-7" is ignored, never read or deleted).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tandem::checkpoint {

std::string StepDirName(uint64_t step);
// The step of a canonical step directory name, else nullopt.
std::optional<uint64_t> ParseStepDirName(std::string_view name);

std::string TempDirName(uint64_t step, int64_t pid);
std::string TrashDirName(uint64_t step, int64_t pid);

// A temp or trash directory's name, parsed: which process made it.
struct ScratchDirName {
  uint64_t step = 0;
  int64_t pid = 0;
};
// Parses ".tmp-step-<step>-<pid>" or ".trash-step-<step>-<pid>", else nullopt.
std::optional<ScratchDirName> ParseScratchDirName(std::string_view name);

}  // namespace tandem::checkpoint
