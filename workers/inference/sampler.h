// Token sampling on the model's device (issue #14; docs/inference.md
// "Sampling"). Given the logits [B, V] (fp32, any device) of B rows and one
// SampleSpec per row, chooses one token per row, batched in tensor ops:
//   temperature 0 (below 1e-6): argmax (ties go to the lowest id);
//   else p = softmax(logits / temperature), and a token is kept when it is
//   among the top_k most likely (top_k -1: all), when the probability mass
//   of the tokens more likely than it is below top_p (nucleus: the smallest
//   set reaching top_p; top_p 1: all), and when its probability is at least
//   min_p times the largest. Each filter reads the same p (as SGLang does);
//   the most likely token is always kept; ties order by lowest id. The
//   kept tokens are drawn in proportion to p.
// The draw is an inverse-CDF lookup with the row's uniform number u from a
// counter-based generator (Philox4x32-10 keyed by the seed, counter
// (sample_index, step)), computed on the host: a seeded sample gets the
// same tokens whatever else is in its batch, on CPU as on CUDA (up to the
// last-bit differences of the two devices' softmax near a CDF boundary).
//
// Each row takes one of four computations, chosen by its own spec only (so
// never by its batch): greedy; unfiltered (inverse CDF over p in id order,
// no sort); top_k <= 1024 (the candidates by at::topk over an exact
// integer key, probability then lowest id); otherwise a full stable sort.
//
// Also returns log p(chosen) under softmax(logits / temperature) (1 for a
// greedy row), whatever the row's filters: the distribution the token was
// drawn from before filtering, SGLang's default and the behaviour policy's
// log-prob RL needs.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "workers/inference/sample_spec.h"

namespace tandem::inference {

struct SamplerOutput {
  at::Tensor tokens;    // [B] int64, on the logits' device
  at::Tensor logprobs;  // [B] fp32, on the logits' device
};

// InvalidArgument for logits that are not [B, V >= 1] fp32 or when
// rows.size() != B; Internal for a LibTorch error.
StatusOr<SamplerOutput> Sample(const at::Tensor& logits, const std::vector<SampleSpec>& rows);

// The uniform number in [0, 1) (a multiple of 2^-24) that row key
// (seed, sample_index, step) draws with.
float SampleUniform(uint64_t seed, int64_t sample_index, int64_t step);

}  // namespace tandem::inference
