// One row of the sampler's input (issue #14; docs/inference.md "Sampling"):
// the filters of a request's SamplingParams and the key of the row's random
// draw. Torch-free, so the scheduler's step plan can carry it and the
// sampler (sampler.h, LibTorch) can read it.
//
// The key (seed, sample_index, step) names one draw of a counter-based
// generator: sample `sample_index` of a request seeded `seed` draws its
// `step`-th output token (0 for the first) from it, whatever else shares
// the batch, on whatever device, and after a retract the re-prefilled
// sequence draws the same numbers again.
#pragma once

#include <cstdint>

#include "workers/inference/generation.h"

namespace tandem::inference {

struct SampleSpec {
  double temperature = 1.0;  // 0: greedy
  double top_p = 1.0;
  int64_t top_k = -1;
  double min_p = 0.0;
  uint64_t seed = 0;
  int64_t sample_index = 0;
  int64_t step = 0;
};

inline SampleSpec MakeSampleSpec(const SamplingParams& p, uint64_t seed, int64_t sample_index, int64_t step) {
  return SampleSpec{p.temperature, p.top_p, p.top_k, p.min_p, seed, sample_index, step};
}

}  // namespace tandem::inference
