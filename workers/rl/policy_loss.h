// The PPO clipped policy loss with its GRPO / DAPO variants (docs/rl.md
// "Losses and advantages"), per token over [B, T] tensors with a response
// mask, aggregated by loss_aggregation.h.
//
// With logp the policy's log-prob of each sampled token, old the behaviour
// policy's (the rollout's, or the actor's before this update), A the
// advantage, r = exp(clamp(logp - old, -20, 20)):
//
//   l_clip  = max(-A r, -A clamp(r, 1 - eps_low, 1 + eps_high))       eps_low != eps_high: DAPO's clip-higher
//   l_pg    = A < 0 and clip_ratio_c given ? min(l_clip, -A c) : l_clip  dual clip (Ye et al.): caps the loss of
//                                                                     a negative-advantage token whose ratio is huge
//   loss    = agg(l_pg) + kl_coef * agg(k(logp, ref)) - entropy_coef * agg(entropy)
//
// agg is the configured aggregation (the same for all three terms, as verl
// does); k the KL estimator (kl.h). This is verl's compute_policy_loss
// (clip_ratio_low/high/c) with the KL to the reference as a loss term (its
// use_kl_loss) rather than a reward penalty.
//
// Gradients flow to `logprobs` (and to `entropy`, a function of the policy
// too) only: old_logprobs, advantages and ref_logprobs are detached inside.
// Masked positions contribute nothing, whatever they hold (NaN, inf), and
// get a zero gradient. Inputs may be float32, bfloat16, float16 or float64
// and may differ; the arithmetic is float32 (float64 if any input is), and
// the loss is a 0-dim tensor of that type on the inputs' device.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "workers/rl/kl.h"
#include "workers/rl/loss_aggregation.h"

namespace tandem::rl {

struct PolicyLossOptions {
  double clip_ratio_low = 0.2;               // eps_low, in [0, 1)
  double clip_ratio_high = 0.2;              // eps_high, >= 0 (DAPO: 0.28)
  std::optional<double> clip_ratio_c;        // dual clip c > 1; none = off
  LossAggregation aggregation = LossAggregation::kTokenMean;
  int64_t max_response_length = 0;           // L of seq-mean-token-sum-norm; 0 = the mask's width
  double kl_coef = 0;                        // >= 0; > 0 needs ref_logprobs
  KlEstimator kl_estimator = KlEstimator::kK3;
  double entropy_coef = 0;                   // >= 0; > 0 needs entropy
};
// InvalidArgument naming the option when out of range or non-finite.
Status Validate(const PolicyLossOptions& options);

struct PolicyLossInputs {
  at::Tensor logprobs;      // [B, T], the policy's (requires grad when training)
  at::Tensor old_logprobs;  // [B, T]
  at::Tensor advantages;    // [B] (one per response) or [B, T] (per token)
  at::Tensor mask;          // [B, T] bool or integer, nonzero = counted
  at::Tensor ref_logprobs;  // [B, T] or undefined; required when kl_coef > 0
  at::Tensor entropy;       // [B, T] or undefined; required when entropy_coef > 0; logged when given
  // The whole batch's N and S when this call is one micro-batch of it
  // (loss_aggregation.h); 0 = this call's.
  double batch_tokens = 0;
  double batch_sequences = 0;
};

// What a trainer logs. 0-dim tensors of the compute type, detached, on the
// inputs' device (no host sync here); an undefined tensor where the input
// it needs was not given. Fractions and means are over counted tokens
// (token-mean, whatever the aggregation), 0 when none.
struct PolicyLossMetrics {
  at::Tensor pg_loss;         // agg(l_pg)
  at::Tensor kl_loss;         // agg(k(logp, ref)), without kl_coef (ref_logprobs given)
  at::Tensor ref_kl_mean;     // token mean of k(logp, ref) (ref_logprobs given)
  at::Tensor entropy_loss;    // agg(entropy), without entropy_coef (entropy given)
  at::Tensor entropy_mean;    // token mean of entropy (entropy given)
  at::Tensor clip_frac_high;  // A > 0 and r > 1 + eps_high (gradient clipped away)
  at::Tensor clip_frac_low;   // A < 0 and r < 1 - eps_low
  at::Tensor dual_clip_frac;  // A < 0 and r > c (dual clip on; else 0)
  at::Tensor approx_kl;       // token mean of old - logp (k1 of the update; verl's ppo_kl)
  at::Tensor ratio_mean;
  at::Tensor ratio_max;
  at::Tensor tokens;          // N of this call

  // ("pg_loss", value), ... for the defined metrics, copied to the host at once.
  std::vector<std::pair<std::string, double>> ToHost() const;
  // Every name ToHost may return, in its order ("pg_loss", ..., "tokens").
  static std::vector<std::string> Names();
};

struct PolicyLossOutput {
  at::Tensor loss;  // 0-dim, differentiable
  PolicyLossMetrics metrics;
};

StatusOr<PolicyLossOutput> ComputePolicyLoss(const PolicyLossInputs& inputs, const PolicyLossOptions& options);

}  // namespace tandem::rl
