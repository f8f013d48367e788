// The multi-teacher on-policy distillation loss (MOPD; issue #18 item 3;
// docs/mopd.md "The loss"), per token over [B, T] tensors with a response
// mask.
//
// Each sequence b carries its route: a weight w_bj per teacher j (0: not on
// its route; not renormalised). With logp the student's log-prob of each
// sampled token, old the behaviour policy's (the rollout's), lt_j teacher
// j's log-prob of the same token:
//
//   S   = sum_j w_j * lt_j          W = sum_j w_j
//   r   = S - W * sg(logp)          the reverse-KL advantage (a weighted log-ratio)
//   rho = exp(min(logp - old, log c)), detached                      cap c (default 5)
//   l   = -rho * exp(logp - sg(logp)) * r                            value -rho r, gradient -rho r dlogp
//   L   = token mean of l over the counted tokens: masked in, and of a
//         sequence with W > 0 (a sequence routed to no teacher adds
//         nothing, not even to the count)
//
// Its gradient is the on-policy estimate of the gradient of
// sum_j w_j KL(pi_theta || pi_Tj) (tests: against finite differences of the
// exact reverse KL). The trainer's total is rl_coef * L_RL + distill_coef * L.
//
// The teacher top-k term (optional; docs/mopd.md "Top-k"): with each
// teacher's k most likely tokens at each position, its log-probs lq_ji
// there and the student's log-probs lp_ji of the same tokens,
//
//   d   = sum_j w_j * sum_i exp(lq_ji) * (lq_ji - lp_ji)
//   L_k = token mean of d over the same counted tokens
//
// the forward KL from each teacher's top-k to the student, truncated to
// those tokens (the teacher's mass outside them is not seen). Its gradient
// raises every token the teacher ranks high in proportion to the teacher's
// probability, also the ones the student did not sample: what the sampled
// term above cannot do for a student that rarely samples the right token.
// The trainer's total adds top_k_coef * L_k.
//
// Masked positions, and a teacher's log-probs where its weight is 0 (it did
// not score that sequence), are replaced by 0 before any arithmetic: NaN or
// inf there reach neither the loss nor any gradient. Gradients flow to
// `logprobs` only. Inputs may be float32, bfloat16, float16 or float64; the
// arithmetic is float32 (float64 if any input is); the loss is a 0-dim
// tensor on the inputs' device.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tandem::rl {

struct DistillLossOptions {
  double ratio_cap = 5.0;  // c: the importance ratio's cap, >= 1
};
// InvalidArgument naming the option when out of range or non-finite.
Status Validate(const DistillLossOptions& options);

struct DistillLossInputs {
  at::Tensor logprobs;          // [B, T], the student's (requires grad when training)
  at::Tensor old_logprobs;      // [B, T], the rollout's
  at::Tensor teacher_logprobs;  // [K, B, T], teacher j's of the student's tokens
  at::Tensor route;             // [B, K], sequence b's weight per teacher, finite and >= 0
  at::Tensor mask;              // [B, T] bool or integer, nonzero = counted
  // The whole batch's counted tokens when this call is one micro-batch of
  // it; 0 = this call's.
  double batch_tokens = 0;
  // The top-k term, both defined or both undefined (no term):
  at::Tensor teacher_top_logprobs;  // [K, B, T, k], teacher j's k largest log-probs at each position
  at::Tensor top_logprobs;          // [K, B, T, k], the student's log-probs of those tokens (requires grad when training)
};

// What a trainer logs: 0-dim detached tensors (no host sync here).
struct DistillLossMetrics {
  at::Tensor distill_loss;       // L
  at::Tensor teacher_log_ratio;  // token mean of (W sg(logp) - S) / W: the weighted reverse-KL estimate
  at::Tensor ratio_capped_frac;  // tokens whose logp - old > log c
  at::Tensor tokens;             // the counted tokens of this call
  // With the top-k term (else undefined): L_k, and the token means of the
  // route-weighted mass the teacher and the student put on the teacher's top-k.
  at::Tensor topk_loss;
  at::Tensor topk_teacher_mass;
  at::Tensor topk_student_mass;
  std::vector<std::pair<std::string, double>> ToHost() const;  // ("distill_loss", v), ...
  static std::vector<std::string> Names();                      // ToHost's names, in its order
};

struct DistillLossOutput {
  at::Tensor loss;       // 0-dim, differentiable
  at::Tensor topk_loss;  // 0-dim, differentiable; undefined without the top-k inputs
  DistillLossMetrics metrics;
};

StatusOr<DistillLossOutput> ComputeDistillLoss(const DistillLossInputs& inputs, const DistillLossOptions& options);

}  // namespace tandem::rl
