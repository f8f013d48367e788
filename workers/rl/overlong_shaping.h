// DAPO's soft overlong punishment (docs/rl.md "Losses and advantages"): a
// response that runs into the last `cache` tokens before the length limit
// loses reward linearly, down to -penalty at the limit, so the policy learns
// to finish before it is cut off. With L = max_length, c = cache, p = penalty
// and a response of n tokens:
//
//   R_length(n) = 0                         n <= L - c
//                 -p * (n - (L - c)) / c    L - c < n <= L
//                 -p                        n > L
//
// and the shaped reward is r + R_length(n). (DAPO: L = 20480, c = 4096,
// p = 1. verl's implementation has no third case: there n <= L always, and
// its penalty keeps growing past L.)
//
// Rewards are [B] floating, lengths [B] integers >= 0 (response tokens,
// counting the end-of-sequence token if the rollout emitted one), on one
// device. Results are float32 (float64 for float64 rewards) on that device.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "common/status.h"

namespace tandem::rl {

struct OverlongShaping {
  int64_t max_length = 0;  // L, > 0; 0 = not given (an algorithm's config leaves it to the job)
  int64_t cache = 0;       // c, 0 < c <= L
  double penalty = 1.0;    // p, finite and >= 0
};
// InvalidArgument naming the field (max_length unset or <= 0, cache out of
// (0, max_length], penalty negative or non-finite).
Status Validate(const OverlongShaping& shaping);

// R_length(n) for each response, [B].
StatusOr<at::Tensor> OverlongPenalty(const at::Tensor& lengths, const OverlongShaping& shaping);
// rewards + R_length(lengths), [B].
StatusOr<at::Tensor> ShapeOverlongRewards(const at::Tensor& rewards, const at::Tensor& lengths,
                                          const OverlongShaping& shaping);

}  // namespace tandem::rl
