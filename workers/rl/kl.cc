// KL estimators (kl.h).
#include "workers/rl/kl.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/clamp.h>
#include <ATen/ops/exp.h>

#include <string>

#include "workers/rl/tensor_args.h"

namespace tandem::rl {

std::string_view KlEstimatorName(KlEstimator e) {
  switch (e) {
    case KlEstimator::kK1: return "k1";
    case KlEstimator::kK3: return "k3";
  }
  return "?";
}

StatusOr<KlEstimator> ParseKlEstimator(std::string_view name) {
  if (name == "k1") return KlEstimator::kK1;
  if (name == "k3") return KlEstimator::kK3;
  return InvalidArgument("unknown KL estimator \"" + std::string(name) + "\" (known: k1, k3)");
}

namespace internal {
at::Tensor TokenKlUnchecked(const at::Tensor& logprobs, const at::Tensor& ref_logprobs, KlEstimator estimator) {
  const at::Tensor d = at::clamp(ref_logprobs.detach() - logprobs, -20.0, 20.0);
  if (estimator == KlEstimator::kK1) return -d;
  return at::exp(d) - d - 1.0;
}
}  // namespace internal

StatusOr<at::Tensor> TokenKl(const at::Tensor& logprobs, const at::Tensor& ref_logprobs, KlEstimator estimator) {
  if (!logprobs.defined()) return InvalidArgument("logprobs: missing (an undefined tensor)");
  TANDEM_RETURN_IF_ERROR(CheckFloating("logprobs", logprobs, logprobs.sizes()));
  TANDEM_RETURN_IF_ERROR(CheckFloating("ref_logprobs", ref_logprobs, logprobs.sizes()));
  TANDEM_RETURN_IF_ERROR(CheckDevice("ref_logprobs", ref_logprobs, logprobs.device()));
  return GuardTorch("token KL", [&]() -> StatusOr<at::Tensor> {
    const at::ScalarType type = ComputeType({logprobs, ref_logprobs});
    return internal::TokenKlUnchecked(logprobs.to(type), ref_logprobs.to(type), estimator);
  });
}

}  // namespace tandem::rl
