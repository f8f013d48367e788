// DAPO's soft overlong punishment (overlong_shaping.h).
#include "workers/rl/overlong_shaping.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/clamp.h>

#include <cmath>
#include <string>

#include "workers/rl/tensor_args.h"

namespace tandem::rl {
namespace {

// R_length over `lengths` (checked), in `type` on the lengths' device.
at::Tensor Penalty(const at::Tensor& lengths, const OverlongShaping& s, at::ScalarType type) {
  const double onset = static_cast<double>(s.max_length - s.cache);
  const at::Tensor n = lengths.to(at::kDouble);
  // (n - onset) / c clamped to [0, 1]: 0 before the cache, 1 at and past L.
  const at::Tensor frac = at::clamp((n - onset) / static_cast<double>(s.cache), 0.0, 1.0);
  return (frac * -s.penalty).to(type);
}

Status CheckLengths(const at::Tensor& lengths) {
  if (!lengths.defined()) return InvalidArgument("lengths: missing (an undefined tensor)");
  if (lengths.dim() != 1) return InvalidArgument("lengths: expected a 1-D tensor, got shape " + ShapeString(lengths.sizes()));
  TANDEM_RETURN_IF_ERROR(CheckIndex("lengths", lengths, lengths.size(0)));
  if (lengths.numel() > 0 && lengths.min().item<int64_t>() < 0)
    return InvalidArgument("lengths: a response length is negative (" +
                           std::to_string(lengths.min().item<int64_t>()) + ")");
  return Status::Ok();
}

}  // namespace

Status Validate(const OverlongShaping& s) {
  if (s.max_length <= 0)
    return InvalidArgument("overlong shaping: max_length must be > 0 (the rollout's max response tokens), got " +
                           std::to_string(s.max_length));
  if (s.cache <= 0 || s.cache > s.max_length)
    return InvalidArgument("overlong shaping: cache must be in (0, max_length = " + std::to_string(s.max_length) +
                           "], got " + std::to_string(s.cache));
  if (!std::isfinite(s.penalty) || s.penalty < 0)
    return InvalidArgument("overlong shaping: penalty must be a finite number >= 0, got " + std::to_string(s.penalty));
  return Status::Ok();
}

StatusOr<at::Tensor> OverlongPenalty(const at::Tensor& lengths, const OverlongShaping& shaping) {
  TANDEM_RETURN_IF_ERROR(Validate(shaping));
  return GuardTorch("overlong penalty", [&]() -> StatusOr<at::Tensor> {
    TANDEM_RETURN_IF_ERROR(CheckLengths(lengths));
    return Penalty(lengths, shaping, at::kFloat);
  });
}

StatusOr<at::Tensor> ShapeOverlongRewards(const at::Tensor& rewards, const at::Tensor& lengths,
                                          const OverlongShaping& shaping) {
  TANDEM_RETURN_IF_ERROR(Validate(shaping));
  return GuardTorch("overlong shaping", [&]() -> StatusOr<at::Tensor> {
    TANDEM_RETURN_IF_ERROR(CheckLengths(lengths));
    TANDEM_RETURN_IF_ERROR(CheckFloating("rewards", rewards, {lengths.size(0)}));
    TANDEM_RETURN_IF_ERROR(CheckDevice("lengths", lengths, rewards.device()));
    const at::ScalarType type = ComputeType({rewards});
    return rewards.detach().to(type) + Penalty(lengths, shaping, type);
  });
}

}  // namespace tandem::rl
