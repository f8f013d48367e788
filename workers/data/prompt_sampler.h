// The seeded, resumable order in which problems are drawn (docs/model.md,
// "Data sets and rewards", "Sampling"). Over a population of n items (a
// bounded data set, after filtering), each epoch is a fresh permutation of
// 0..n-1, a Fisher-Yates shuffle keyed by (seed, epoch) with SeededRandom,
// so it is the same on every machine; epoch e+1 begins where epoch e ends.
// Over an unbounded (procedural) set the draws are simply 0, 1, 2, ...:
// its problems are random already.
//
// The cursor (seed, epoch, position within the epoch, and the population it
// was made for) is all the state: saved to JSON by a checkpoint and
// restored, the sampler continues with exactly the draws it would have
// made. Restoring against a different population is refused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tandem::data {

struct SamplerCursor {
  uint64_t seed = 0;
  uint64_t epoch = 0;
  uint64_t position = 0;                // draws made in this epoch
  std::optional<uint64_t> population;   // nullopt: unbounded
  friend bool operator==(const SamplerCursor&, const SamplerCursor&) = default;
};

// {"seed": S, "epoch": E, "position": P, "population": N or null}
nlohmann::json SamplerCursorToJson(const SamplerCursor& c);
// The inverse; InvalidArgument naming the key that is missing or not a
// non-negative integer.
StatusOr<SamplerCursor> SamplerCursorFromJson(const nlohmann::json& j);

class PromptSampler {
 public:
  // A sampler at the start of epoch 0. population 0 is InvalidArgument.
  static StatusOr<PromptSampler> Create(std::optional<size_t> population, uint64_t seed);
  // A sampler that continues from `cursor`; FailedPrecondition when the
  // cursor was made for another population, InvalidArgument when its
  // position is past the epoch's end.
  static StatusOr<PromptSampler> Restore(std::optional<size_t> population, const SamplerCursor& cursor);

  // The next item, in [0, population) (any value when unbounded).
  size_t Next();
  SamplerCursor cursor() const { return cursor_; }

 private:
  explicit PromptSampler(SamplerCursor c) : cursor_(c) {}
  void ShuffleEpoch();

  SamplerCursor cursor_;
  std::vector<size_t> order_;  // this epoch's permutation (bounded only)
};

}  // namespace tandem::data
