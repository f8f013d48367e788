// Loss aggregation modes (loss_aggregation.h).
#include "workers/rl/loss_aggregation.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/clamp_min.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/where.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "workers/rl/tensor_args.h"

namespace tandem::rl {

std::string_view LossAggregationName(LossAggregation a) {
  switch (a) {
    case LossAggregation::kTokenMean: return "token-mean";
    case LossAggregation::kSeqMeanTokenMean: return "seq-mean-token-mean";
    case LossAggregation::kSeqMeanTokenSumNorm: return "seq-mean-token-sum-norm";
  }
  return "?";
}

StatusOr<LossAggregation> ParseLossAggregation(std::string_view name) {
  for (const LossAggregation a :
       {LossAggregation::kTokenMean, LossAggregation::kSeqMeanTokenMean, LossAggregation::kSeqMeanTokenSumNorm})
    if (name == LossAggregationName(a)) return a;
  return InvalidArgument("unknown loss aggregation \"" + std::string(name) +
                         "\" (known: token-mean, seq-mean-token-mean, seq-mean-token-sum-norm)");
}

Status Validate(const AggregationScale& scale) {
  if (!std::isfinite(scale.tokens) || scale.tokens < 0)
    return InvalidArgument("aggregation tokens: expected a finite number >= 0, got " + std::to_string(scale.tokens));
  if (!std::isfinite(scale.sequences) || scale.sequences < 0)
    return InvalidArgument("aggregation sequences: expected a finite number >= 0, got " +
                           std::to_string(scale.sequences));
  if (scale.max_response_length < 0)
    return InvalidArgument("max_response_length: expected >= 0, got " + std::to_string(scale.max_response_length));
  return Status::Ok();
}

namespace internal {
at::Tensor AggregateUnchecked(const at::Tensor& per_token, const at::Tensor& maskf, LossAggregation mode,
                              const AggregationScale& scale) {
  // A count of 0 means every numerator is 0 too: dividing by max(count, 1)
  // gives the exact 0 and keeps the graph (no host sync for the count).
  switch (mode) {
    case LossAggregation::kTokenMean: {
      const at::Tensor total = per_token.sum();
      if (scale.tokens > 0) return total / scale.tokens;
      return total / at::clamp_min(maskf.sum(), 1.0);
    }
    case LossAggregation::kSeqMeanTokenMean: {
      const at::Tensor n = maskf.sum(1);
      const at::Tensor per_seq = per_token.sum(1) / at::clamp_min(n, 1.0);
      if (scale.sequences > 0) return per_seq.sum() / scale.sequences;
      return per_seq.sum() / at::clamp_min((n > 0).to(per_token.scalar_type()).sum(), 1.0);
    }
    case LossAggregation::kSeqMeanTokenSumNorm: {
      const double length =
          static_cast<double>(scale.max_response_length > 0 ? scale.max_response_length : per_token.size(1));
      const at::Tensor total = per_token.sum() / std::max(length, 1.0);
      if (scale.sequences > 0) return total / scale.sequences;
      const at::Tensor s = (maskf.sum(1) > 0).to(per_token.scalar_type()).sum();
      return total / at::clamp_min(s, 1.0);
    }
  }
  return per_token.sum() * 0.0;
}
}  // namespace internal

StatusOr<at::Tensor> AggregateLoss(const at::Tensor& per_token, const at::Tensor& mask, LossAggregation mode,
                                   const AggregationScale& scale) {
  TANDEM_RETURN_IF_ERROR(Validate(scale));
  TANDEM_RETURN_IF_ERROR(CheckFloatingRank("per_token", per_token, 2));
  TANDEM_RETURN_IF_ERROR(CheckMask("mask", mask, per_token.sizes()));
  TANDEM_RETURN_IF_ERROR(CheckDevice("mask", mask, per_token.device()));
  return GuardTorch("aggregate loss", [&]() -> StatusOr<at::Tensor> {
    const at::ScalarType type = ComputeType({per_token});
    const at::Tensor m = mask != 0;
    const at::Tensor x = at::where(m, per_token.to(type), at::scalar_tensor(0.0, per_token.options().dtype(type)));
    return internal::AggregateUnchecked(x, m.to(type), mode, scale);
  });
}

}  // namespace tandem::rl
