// Aggregating a per-token loss into the scalar a trainer differentiates
// (docs/rl.md "Losses and advantages"). Per-token tensors are [B, T]: B
// responses padded to T tokens, with a mask [B, T] (nonzero = a response
// token that counts). With l the per-token loss, m the mask, n_i = sum_t m_it
// the tokens of response i, and S the responses with n_i > 0:
//
//   token-mean               sum_it m l / N,                 N = sum_it m      (DAPO; verl's default)
//   seq-mean-token-mean      (1/S) sum_i (sum_t m l) / n_i                    (GRPO, DeepSeekMath)
//   seq-mean-token-sum-norm  sum_it m l / (S * L)                             (Dr. GRPO)
//
// L is a constant: the job's max response length (`max_response_length`),
// or T when not given. This is TRL's dr_grpo normaliser (B x
// max_completion_length); verl divides by L only (not by S), a factor S
// larger. Responses with no counted token are not in S (a padding row of a
// micro-batch changes nothing).
//
// One batch is often split into micro-batches whose gradients add up: pass
// the whole batch's N (`tokens`) and S (`sequences`) and a fixed L, and the
// micro-batch losses sum to the whole batch's loss in every mode. An
// empty mask gives a loss of exactly 0 that still backpropagates (zeros).
// Masked positions never reach the result, whatever they hold (NaN too).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string_view>

#include "common/status.h"

namespace tandem::rl {

enum class LossAggregation {
  kTokenMean,            // "token-mean"
  kSeqMeanTokenMean,     // "seq-mean-token-mean"
  kSeqMeanTokenSumNorm,  // "seq-mean-token-sum-norm"
};
std::string_view LossAggregationName(LossAggregation a);
// One of the three names; InvalidArgument listing them otherwise.
StatusOr<LossAggregation> ParseLossAggregation(std::string_view name);

// The denominators; 0 means "from this call's mask" (N, S) or "T" (L).
struct AggregationScale {
  double tokens = 0;                // N for token-mean; > 0 when given
  double sequences = 0;             // S for the seq-* modes; > 0 when given
  int64_t max_response_length = 0;  // L for seq-mean-token-sum-norm; > 0 when given
};
// InvalidArgument for negative or non-finite fields.
Status Validate(const AggregationScale& scale);

// `per_token` [B, T] floating (its gradient flows), `mask` [B, T] bool or
// integer, on one device. A 0-dim tensor in the compute type (tensor_args.h).
StatusOr<at::Tensor> AggregateLoss(const at::Tensor& per_token, const at::Tensor& mask, LossAggregation mode,
                                   const AggregationScale& scale = {});

namespace internal {
// AggregateLoss without the checks: `per_token` already zero where masked,
// `maskf` the mask as 0/1 in per_token's dtype.
at::Tensor AggregateUnchecked(const at::Tensor& per_token, const at::Tensor& maskf, LossAggregation mode,
                              const AggregationScale& scale);
}  // namespace internal

}  // namespace tandem::rl
