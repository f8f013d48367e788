// Dynamic sampling's filter (dynamic_sampling.h).
#include "workers/rl/dynamic_sampling.h"

#include <ATen/ops/empty.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "workers/rl/tensor_args.h"

namespace tandem::rl {

StatusOr<KeptGroups> GroupsWithVariedRewards(const at::Tensor& rewards, const Groups& groups) {
  TANDEM_RETURN_IF_ERROR(Validate(groups));
  TANDEM_RETURN_IF_ERROR(CheckFloating("rewards", rewards, {groups.num_samples()}));
  return GuardTorch("dynamic sampling", [&]() -> StatusOr<KeptGroups> {
    const at::Tensor host = rewards.detach().to(at::kCPU, at::kDouble).contiguous();
    const double* r = host.data_ptr<double>();
    const size_t num_groups = static_cast<size_t>(groups.num_groups());
    std::vector<double> lo(num_groups, INFINITY), hi(num_groups, -INFINITY);
    for (int64_t i = 0; i < host.numel(); ++i) {
      if (!std::isfinite(r[i]))
        return InvalidArgument("rewards: sample " + std::to_string(i) + " is " + std::to_string(r[i]) +
                               " (rewards must be finite)");
      const size_t g = static_cast<size_t>(groups.group_of_sample[static_cast<size_t>(i)]);
      lo[g] = std::min(lo[g], r[i]);
      hi[g] = std::max(hi[g], r[i]);
    }
    KeptGroups kept;
    std::vector<char> keep(num_groups, 0);
    for (size_t g = 0; g < num_groups; ++g) {
      keep[g] = groups.sizes[g] >= 2 && lo[g] != hi[g];
      if (keep[g]) kept.groups.push_back(static_cast<int64_t>(g));
    }
    std::vector<int64_t> samples;
    for (int64_t i = 0; i < host.numel(); ++i)
      if (keep[static_cast<size_t>(groups.group_of_sample[static_cast<size_t>(i)])]) samples.push_back(i);
    at::Tensor index = at::empty({static_cast<int64_t>(samples.size())}, at::TensorOptions().dtype(at::kLong));
    if (!samples.empty()) std::memcpy(index.data_ptr<int64_t>(), samples.data(), samples.size() * sizeof(int64_t));
    kept.samples = index.to(rewards.device());
    return kept;
  });
}

}  // namespace tandem::rl
