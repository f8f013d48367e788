// RL algorithms by name (docs/rl.md "Losses and advantages"): a job spec
// names one, `"algorithm": "dapo"` or `{"name": "dapo", "options": {...}}`,
// and gets its configuration (algorithm_config.h) and its loss function.
// The built-ins share the PPO clipped loss (policy_loss.h) and differ in
// their defaults:
//
//   grpo     DeepSeekMath: GRPO advantages, clip 0.2/0.2, seq-mean-token-mean, KL k3 with kl_coef 0.04
//   dr_grpo  Dr. GRPO: advantages without std division, seq-mean-token-sum-norm, clip 0.2/0.2, no KL
//   dapo     DAPO: GRPO advantages, clip-higher 0.2/0.28, dual clip c = 10, token-mean, no KL,
//            dynamic sampling, overlong shaping with cache 4096 and penalty 1 (max_length: the job's)
//   mopd     MOPD (docs/mopd.md): GRPO advantages, clip 0.2/0.2, token-mean, no KL, and the distill
//            term with rl_coef 1, distill_coef 1, ratio_cap 5
//
// A registry is a value (no global table): a job builds one with the
// built-ins, and a caller may add its own algorithms with their own loss
// functions (Register). Unknown names are InvalidArgument listing the known
// ones.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "workers/rl/algorithm_config.h"
#include "workers/rl/policy_loss.h"

namespace tandem::rl {

// The loss of one (micro-)batch under a resolved config.
using PolicyLossFn = std::function<StatusOr<PolicyLossOutput>(const PolicyLossInputs&, const AlgorithmConfig&)>;

struct Algorithm {
  std::string name;     // [a-z0-9_]+, as a job spec writes it
  std::string summary;  // one line, for `--help` and errors
  AlgorithmConfig config;
  PolicyLossFn loss;
};

// ComputePolicyLoss(inputs, config.loss): the built-ins' loss.
StatusOr<PolicyLossOutput> PpoClippedLoss(const PolicyLossInputs& inputs, const AlgorithmConfig& config);

class AlgorithmRegistry {
 public:
  AlgorithmRegistry() = default;
  // grpo, dr_grpo and dapo as above.
  static AlgorithmRegistry WithBuiltins();

  // AlreadyExists for a taken name; InvalidArgument for a bad name, no loss
  // function or an invalid config.
  Status Register(Algorithm algorithm);
  // The algorithm with its default config; InvalidArgument listing the
  // known names when there is none.
  StatusOr<Algorithm> Find(std::string_view name) const;
  // A job spec's `algorithm`: a name, or {"name": ..., "options": {...}}
  // with the options applied strictly over the defaults.
  StatusOr<Algorithm> Resolve(const nlohmann::json& spec) const;
  // Sorted.
  std::vector<std::string> Names() const;

 private:
  std::map<std::string, Algorithm, std::less<>> algorithms_;
};

}  // namespace tandem::rl
