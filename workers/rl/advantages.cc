// Group-relative advantages (advantages.h).
#include "workers/rl/advantages.h"

#include <ATen/ops/empty.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "workers/rl/tensor_args.h"

namespace tandem::rl {

std::string_view AdvantageEstimatorName(AdvantageEstimator e) {
  switch (e) {
    case AdvantageEstimator::kGrpo: return "grpo";
    case AdvantageEstimator::kDrGrpo: return "dr_grpo";
  }
  return "?";
}

StatusOr<AdvantageEstimator> ParseAdvantageEstimator(std::string_view name) {
  if (name == "grpo") return AdvantageEstimator::kGrpo;
  if (name == "dr_grpo") return AdvantageEstimator::kDrGrpo;
  return InvalidArgument("unknown advantage estimator \"" + std::string(name) + "\" (known: grpo, dr_grpo)");
}

Status Validate(const AdvantageOptions& options) {
  if (!std::isfinite(options.eps) || options.eps < 0)
    return InvalidArgument("advantage eps: expected a finite number >= 0, got " + std::to_string(options.eps));
  return Status::Ok();
}

StatusOr<GroupAdvantages> ComputeGroupAdvantages(const at::Tensor& rewards, const Groups& groups,
                                                 const AdvantageOptions& options) {
  TANDEM_RETURN_IF_ERROR(Validate(options));
  TANDEM_RETURN_IF_ERROR(Validate(groups));
  TANDEM_RETURN_IF_ERROR(CheckFloating("rewards", rewards, {groups.num_samples()}));
  return GuardTorch("group advantages", [&]() -> StatusOr<GroupAdvantages> {
    const at::Tensor host = rewards.detach().to(at::kCPU, at::kDouble).contiguous();
    const double* r = host.data_ptr<double>();
    const int64_t n = host.numel();
    for (int64_t i = 0; i < n; ++i)
      if (!std::isfinite(r[i]))
        return InvalidArgument("rewards: sample " + std::to_string(i) + " is " + std::to_string(r[i]) +
                               " (rewards must be finite)");

    const size_t num_groups = static_cast<size_t>(groups.num_groups());
    std::vector<double> sum(num_groups, 0.0), lo(num_groups, INFINITY), hi(num_groups, -INFINITY);
    for (int64_t i = 0; i < n; ++i) {
      const size_t g = static_cast<size_t>(groups.group_of_sample[static_cast<size_t>(i)]);
      sum[g] += r[i];
      lo[g] = std::min(lo[g], r[i]);
      hi[g] = std::max(hi[g], r[i]);
    }
    std::vector<double> mean(num_groups, 0.0), sq(num_groups, 0.0), stdev(num_groups, 0.0);
    for (size_t g = 0; g < num_groups; ++g)
      if (groups.sizes[g] > 0) mean[g] = sum[g] / static_cast<double>(groups.sizes[g]);
    for (int64_t i = 0; i < n; ++i) {
      const size_t g = static_cast<size_t>(groups.group_of_sample[static_cast<size_t>(i)]);
      sq[g] += (r[i] - mean[g]) * (r[i] - mean[g]);
    }
    for (size_t g = 0; g < num_groups; ++g) {
      const int64_t size = groups.sizes[g];
      const double denom = options.std_unbiased ? static_cast<double>(size - 1) : static_cast<double>(size);
      if (size > 1) stdev[g] = std::sqrt(sq[g] / denom);
    }

    const at::ScalarType out_type = rewards.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
    at::Tensor adv = at::empty({n}, at::TensorOptions().dtype(at::kDouble));
    at::Tensor gmean = at::empty({n}, at::TensorOptions().dtype(at::kDouble));
    at::Tensor gstd = at::empty({n}, at::TensorOptions().dtype(at::kDouble));
    double* a = adv.data_ptr<double>();
    double* m = gmean.data_ptr<double>();
    double* s = gstd.data_ptr<double>();
    for (int64_t i = 0; i < n; ++i) {
      const size_t g = static_cast<size_t>(groups.group_of_sample[static_cast<size_t>(i)]);
      m[i] = mean[g];
      s[i] = stdev[g];
      // One sample, or all equal: no signal, exactly zero.
      if (groups.sizes[g] < 2 || lo[g] == hi[g]) {
        a[i] = 0.0;
        continue;
      }
      const double centred = r[i] - mean[g];
      a[i] = options.estimator == AdvantageEstimator::kGrpo ? centred / (stdev[g] + options.eps) : centred;
    }
    const at::TensorOptions out = at::TensorOptions().dtype(out_type).device(rewards.device());
    return GroupAdvantages{adv.to(out), gmean.to(out), gstd.to(out)};
  });
}

}  // namespace tandem::rl
