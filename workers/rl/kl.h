// Per-token estimators of the KL divergence KL(pi || pi_ref) from tokens
// sampled from pi (Schulman, "Approximating KL Divergence"; docs/rl.md
// "Losses and advantages"). With d = ref_logp - logp, clamped to [-20, 20]
// before exp (as verl does):
//
//   k1 = -d = logp - ref_logp           unbiased, can be negative
//   k3 = exp(d) - d - 1                 unbiased, >= 0, low variance (GRPO's; verl's "low_var_kl",
//                                       here without verl's clamp of the estimate to [-10, 10])
//
// The gradient flows to `logprobs` only (ref_logprobs is detached).
#pragma once

#include <ATen/core/Tensor.h>

#include <string_view>

#include "common/status.h"

namespace tandem::rl {

enum class KlEstimator {
  kK1,  // "k1"
  kK3,  // "k3"
};
std::string_view KlEstimatorName(KlEstimator e);
// "k1" or "k3"; InvalidArgument naming both otherwise.
StatusOr<KlEstimator> ParseKlEstimator(std::string_view name);

// The estimate per token, same shape as the inputs (which must match; both
// floating, one device), in the compute type (tensor_args.h). No mask: the
// caller aggregates (loss_aggregation.h).
StatusOr<at::Tensor> TokenKl(const at::Tensor& logprobs, const at::Tensor& ref_logprobs, KlEstimator estimator);

namespace internal {
// TokenKl without the checks, for inputs already checked and cast.
at::Tensor TokenKlUnchecked(const at::Tensor& logprobs, const at::Tensor& ref_logprobs, KlEstimator estimator);
}  // namespace internal

}  // namespace tandem::rl
