// RL algorithms by name (algorithm_registry.h).
#include "workers/rl/algorithm_registry.h"

#include <utility>

namespace tandem::rl {
namespace {

std::string KnownList(const AlgorithmRegistry& r) {
  std::string s;
  for (const std::string& n : r.Names()) s += (s.empty() ? "" : ", ") + n;
  return s.empty() ? "none registered" : s;
}

bool ValidName(std::string_view n) {
  if (n.empty()) return false;
  for (const char c : n)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

}  // namespace

StatusOr<PolicyLossOutput> PpoClippedLoss(const PolicyLossInputs& inputs, const AlgorithmConfig& config) {
  return ComputePolicyLoss(inputs, config.loss);
}

AlgorithmRegistry AlgorithmRegistry::WithBuiltins() {
  AlgorithmRegistry r;
  {
    Algorithm a{"grpo", "GRPO (DeepSeekMath): group-normalised advantages, seq-mean-token-mean, k3 KL 0.04", {},
                PpoClippedLoss};
    a.config.loss.aggregation = LossAggregation::kSeqMeanTokenMean;
    a.config.loss.kl_coef = 0.04;
    a.config.loss.kl_estimator = KlEstimator::kK3;
    (void)r.Register(std::move(a));
  }
  {
    Algorithm a{"dr_grpo", "Dr. GRPO: no std division, constant normaliser (seq-mean-token-sum-norm), no KL", {},
                PpoClippedLoss};
    a.config.advantage.estimator = AdvantageEstimator::kDrGrpo;
    a.config.loss.aggregation = LossAggregation::kSeqMeanTokenSumNorm;
    (void)r.Register(std::move(a));
  }
  {
    Algorithm a{"dapo", "DAPO: clip-higher 0.28, dual clip 10, token-mean, dynamic sampling, overlong shaping", {},
                PpoClippedLoss};
    a.config.loss.clip_ratio_high = 0.28;
    a.config.loss.clip_ratio_c = 10.0;
    a.config.loss.aggregation = LossAggregation::kTokenMean;
    a.config.dynamic_sampling = true;
    a.config.overlong = OverlongShaping{/*max_length=*/0, /*cache=*/4096, /*penalty=*/1.0};
    (void)r.Register(std::move(a));
  }
  {
    Algorithm a{"mopd", "MOPD: GRPO's policy loss (token-mean, no KL) plus the routed teachers' reverse KL", {},
                PpoClippedLoss};
    a.config.loss.aggregation = LossAggregation::kTokenMean;
    a.config.distill = DistillConfig{};
    (void)r.Register(std::move(a));
  }
  return r;
}

Status AlgorithmRegistry::Register(Algorithm algorithm) {
  if (!ValidName(algorithm.name))
    return InvalidArgument("algorithm name \"" + algorithm.name + "\": expected [a-z0-9_]+");
  if (!algorithm.loss) return InvalidArgument("algorithm " + algorithm.name + ": no loss function");
  TANDEM_RETURN_IF_ERROR(Validate(algorithm.config), "algorithm " + algorithm.name);
  if (algorithms_.count(algorithm.name) > 0)
    return AlreadyExists("algorithm " + algorithm.name + ": already registered");
  std::string name = algorithm.name;
  algorithms_.emplace(std::move(name), std::move(algorithm));
  return Status::Ok();
}

StatusOr<Algorithm> AlgorithmRegistry::Find(std::string_view name) const {
  const auto it = algorithms_.find(name);
  if (it == algorithms_.end())
    return InvalidArgument("unknown algorithm \"" + std::string(name) + "\" (known: " + KnownList(*this) + ")");
  return it->second;
}

StatusOr<Algorithm> AlgorithmRegistry::Resolve(const nlohmann::json& spec) const {
  if (spec.is_string()) return Find(spec.get<std::string>());
  if (!spec.is_object())
    return InvalidArgument("algorithm: expected a name or {\"name\": ..., \"options\": {...}}, got " +
                           spec.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  for (const auto& item : spec.items())
    if (item.key() != "name" && item.key() != "options")
      return InvalidArgument("algorithm: unknown key \"" + item.key() + "\" (known: name, options)");
  const auto name = spec.find("name");
  if (name == spec.end()) return InvalidArgument("algorithm.name: required (known: " + KnownList(*this) + ")");
  if (!name->is_string())
    return InvalidArgument("algorithm.name: expected a string, got " +
                           name->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  TANDEM_ASSIGN_OR_RETURN(Algorithm a, Find(name->get<std::string>()), "algorithm.name");
  const auto options = spec.find("options");
  if (options != spec.end()) {
    TANDEM_ASSIGN_OR_RETURN(a.config, ApplyAlgorithmOptions(a.config, *options, "algorithm " + a.name + ": options"));
  }
  return a;
}

std::vector<std::string> AlgorithmRegistry::Names() const {
  std::vector<std::string> names;
  for (const auto& [n, a] : algorithms_) names.push_back(n);
  return names;
}

}  // namespace tandem::rl
