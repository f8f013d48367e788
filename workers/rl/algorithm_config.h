// An RL algorithm's configuration (docs/rl.md "Losses and advantages"): the
// advantage estimator, the policy loss (clip ranges, aggregation, KL,
// entropy), dynamic sampling and overlong shaping, and its strict JSON form,
// which a job spec carries as `"algorithm": {"name": ..., "options": {...}}`
// (algorithm_registry.h resolves the name).
//
// Options, all optional, each over the named algorithm's default:
//   advantage_estimator  "grpo" | "dr_grpo"
//   advantage_eps        number >= 0
//   std_unbiased         bool
//   clip_ratio_low       number in [0, 1)
//   clip_ratio_high      number >= 0
//   clip_ratio_c         number > 1, or null (dual clip off)
//   loss_agg_mode        "token-mean" | "seq-mean-token-mean" | "seq-mean-token-sum-norm"
//   max_response_length  integer > 0, or null (the job's max response length)
//   kl_coef              number >= 0
//   kl_estimator         "k1" | "k3"
//   entropy_coef         number >= 0
//   dynamic_sampling     bool
//   overlong_shaping     null (off) or {"cache": integer > 0, "penalty": number >= 0,
//                        "max_length": integer > 0 or null (the job's max response length)}
//   distill              null (off) or {"rl_coef": number >= 0, "distill_coef": number >= 0,
//                        "ratio_cap": number >= 1}: the MOPD term (distill_loss.h), total
//                        rl_coef * policy loss + distill_coef * distill loss; on, the
//                        trajectories carry teacher log-probs and routes (docs/mopd.md)
// An unknown key, a wrong type or a value out of range is InvalidArgument
// naming the key ("algorithm dapo: options.clip_ratio_high: expected a
// number >= 0, got \"0.3\"").
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "workers/rl/advantages.h"
#include "workers/rl/distill_loss.h"
#include "workers/rl/overlong_shaping.h"
#include "workers/rl/policy_loss.h"

namespace tandem::rl {

// MOPD's term beside the policy loss.
// The most top-k tokens a teacher is asked for per position (the teacher's
// own default bound on top_logprobs_num).
inline constexpr int64_t kMaxDistillTopK = 64;

struct DistillConfig {
  double rl_coef = 1.0;       // the policy loss's weight, >= 0
  double distill_coef = 1.0;  // the distill loss's (sampled tokens) weight, >= 0
  DistillLossOptions loss;    // ratio_cap
  // The teacher top-k term (distill_loss.h): each teacher returns its top_k
  // most likely tokens at each position; 0 = off. In [0, kMaxDistillTopK].
  int64_t top_k = 0;
  double top_k_coef = 1.0;    // its weight, >= 0 (used when top_k > 0)
};

struct AlgorithmConfig {
  AdvantageOptions advantage;
  PolicyLossOptions loss;
  bool dynamic_sampling = false;            // drop groups whose rewards are all equal (dynamic_sampling.h)
  std::optional<OverlongShaping> overlong;  // none = off; max_length 0 = the job's max response length
  std::optional<DistillConfig> distill;     // none = off (no teacher term)
};

// Every part valid; an overlong max_length of 0 is allowed here (the job
// fills it in, WithJobLimits).
Status Validate(const AlgorithmConfig& config);

// `options` (null or an object) applied over `config`; `where` prefixes
// errors ("algorithm dapo: options").
StatusOr<AlgorithmConfig> ApplyAlgorithmOptions(const AlgorithmConfig& config, const nlohmann::json& options,
                                                std::string_view where);

// The config as options JSON (every key), which ApplyAlgorithmOptions reads
// back to the same config: what the run directory records.
nlohmann::json AlgorithmOptionsJson(const AlgorithmConfig& config);

// The job's max response length (the rollout's max new tokens) filled into
// what was left to it: overlong max_length and the loss's
// max_response_length when 0. InvalidArgument when the shaping is then
// invalid (its cache longer than the responses can be).
StatusOr<AlgorithmConfig> WithJobLimits(const AlgorithmConfig& config, int64_t max_response_tokens);

}  // namespace tandem::rl
