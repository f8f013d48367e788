// Group-relative advantages (docs/rl.md "Losses and advantages"): GRPO
// (DeepSeekMath) and Dr. GRPO ("Understanding R1-Zero-Like Training").
//
// For sample i in group g with n_g samples and rewards r:
//   mean_g = (1/n_g) sum_{j in g} r_j
//   std_g  = sqrt(sum_{j in g} (r_j - mean_g)^2 / (n_g - 1))   std_unbiased (default)
//            sqrt(sum_{j in g} (r_j - mean_g)^2 / n_g)         otherwise
//   GRPO:     A_i = (r_i - mean_g) / (std_g + eps)
//   Dr. GRPO: A_i =  r_i - mean_g                              (no std division)
// The default, Bessel-corrected std with eps = 1e-6 added to it, is what
// verl's compute_grpo_outcome_advantage (torch.std, epsilon 1e-6) and TRL's
// GRPOTrainer (torch.std; its eps is 1e-4) compute.
//
// A group of one sample, or whose rewards are all equal, gives exactly zero
// advantages (it carries no signal; computed as such, not left to rounding:
// the mean of three 0.1 is not 0.1 in floating point). verl differs here for
// a group of one: it uses mean 0 and std 1, so A = r.
//
// Rewards are [B], floating, any device; non-finite rewards are refused
// (InvalidArgument naming the sample). The arithmetic runs on the host in
// float64 (B is the batch of responses, thousands at most); the results are
// float32 (float64 for float64 rewards) on the rewards' device. Nothing here
// has a gradient.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <string_view>

#include "common/status.h"
#include "workers/rl/groups.h"

namespace tandem::rl {

enum class AdvantageEstimator {
  kGrpo,    // "grpo": (r - mean) / (std + eps)
  kDrGrpo,  // "dr_grpo": r - mean; pair with the seq-mean-token-sum-norm loss
};
std::string_view AdvantageEstimatorName(AdvantageEstimator e);
// "grpo" or "dr_grpo"; InvalidArgument naming both otherwise.
StatusOr<AdvantageEstimator> ParseAdvantageEstimator(std::string_view name);

struct AdvantageOptions {
  AdvantageEstimator estimator = AdvantageEstimator::kGrpo;
  double eps = 1e-6;          // >= 0, added to the std (GRPO only)
  bool std_unbiased = true;   // divide by n-1 (torch.std's default) or by n
};
// InvalidArgument for eps < 0 or non-finite.
Status Validate(const AdvantageOptions& options);

struct GroupAdvantages {
  at::Tensor advantages;  // [B]
  at::Tensor group_mean;  // [B]: the mean reward of each sample's group
  at::Tensor group_std;   // [B]: its std (0 for a group of one), as above
};

// `rewards` [B] and `groups` of B samples (groups.h).
StatusOr<GroupAdvantages> ComputeGroupAdvantages(const at::Tensor& rewards, const Groups& groups,
                                                 const AdvantageOptions& options);

}  // namespace tandem::rl
