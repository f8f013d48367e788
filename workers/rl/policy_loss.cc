// The PPO clipped policy loss (policy_loss.h).
#include "workers/rl/policy_loss.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/clamp.h>
#include <ATen/ops/clamp_min.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/maximum.h>
#include <ATen/ops/minimum.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/where.h>
#include <c10/core/GradMode.h>

#include <cmath>
#include <limits>

#include "workers/rl/tensor_args.h"

namespace tandem::rl {
namespace {

Status CheckCoef(const char* name, double v, double lo, bool lo_open, double hi, bool hi_open) {
  const bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  if (ok) return Status::Ok();
  std::string range = std::string(lo_open ? "(" : "[") + std::to_string(lo) + ", " +
                      (std::isinf(hi) ? std::string("inf") : std::to_string(hi)) + (hi_open ? ")" : "]");
  return InvalidArgument(std::string(name) + ": expected a number in " + range + ", got " + std::to_string(v));
}

constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

Status Validate(const PolicyLossOptions& o) {
  TANDEM_RETURN_IF_ERROR(CheckCoef("clip_ratio_low", o.clip_ratio_low, 0, false, 1, true));
  TANDEM_RETURN_IF_ERROR(CheckCoef("clip_ratio_high", o.clip_ratio_high, 0, false, kInf, true));
  if (o.clip_ratio_c) TANDEM_RETURN_IF_ERROR(CheckCoef("clip_ratio_c", *o.clip_ratio_c, 1, true, kInf, true));
  if (o.max_response_length < 0)
    return InvalidArgument("max_response_length: expected >= 0, got " + std::to_string(o.max_response_length));
  TANDEM_RETURN_IF_ERROR(CheckCoef("kl_coef", o.kl_coef, 0, false, kInf, true));
  TANDEM_RETURN_IF_ERROR(CheckCoef("entropy_coef", o.entropy_coef, 0, false, kInf, true));
  return Status::Ok();
}

namespace {
// The metrics by name, in ToHost's order.
constexpr std::pair<const char*, at::Tensor PolicyLossMetrics::*> kMetricFields[] = {
    {"pg_loss", &PolicyLossMetrics::pg_loss},           {"kl_loss", &PolicyLossMetrics::kl_loss},
    {"ref_kl_mean", &PolicyLossMetrics::ref_kl_mean},   {"entropy_loss", &PolicyLossMetrics::entropy_loss},
    {"entropy_mean", &PolicyLossMetrics::entropy_mean}, {"clip_frac_high", &PolicyLossMetrics::clip_frac_high},
    {"clip_frac_low", &PolicyLossMetrics::clip_frac_low}, {"dual_clip_frac", &PolicyLossMetrics::dual_clip_frac},
    {"approx_kl", &PolicyLossMetrics::approx_kl},       {"ratio_mean", &PolicyLossMetrics::ratio_mean},
    {"ratio_max", &PolicyLossMetrics::ratio_max},       {"tokens", &PolicyLossMetrics::tokens}};
}  // namespace

std::vector<std::string> PolicyLossMetrics::Names() {
  std::vector<std::string> out;
  for (const auto& [name, field] : kMetricFields) out.emplace_back(name);
  return out;
}

std::vector<std::pair<std::string, double>> PolicyLossMetrics::ToHost() const {
  std::vector<std::pair<const char*, const at::Tensor*>> all;
  for (const auto& [name, field] : kMetricFields) all.emplace_back(name, &(this->*field));
  return ScalarsToHost(all);
}

StatusOr<PolicyLossOutput> ComputePolicyLoss(const PolicyLossInputs& in, const PolicyLossOptions& o) {
  TANDEM_RETURN_IF_ERROR(Validate(o));
  TANDEM_RETURN_IF_ERROR(Validate(AggregationScale{in.batch_tokens, in.batch_sequences, o.max_response_length}));
  TANDEM_RETURN_IF_ERROR(CheckFloatingRank("logprobs", in.logprobs, 2));
  const at::IntArrayRef bt = in.logprobs.sizes();
  const at::Device dev = in.logprobs.device();
  TANDEM_RETURN_IF_ERROR(CheckFloating("old_logprobs", in.old_logprobs, bt));
  TANDEM_RETURN_IF_ERROR(CheckMask("mask", in.mask, bt));
  if (in.advantages.defined() && in.advantages.dim() == 1)
    TANDEM_RETURN_IF_ERROR(CheckFloating("advantages", in.advantages, {bt[0]}));
  else
    TANDEM_RETURN_IF_ERROR(CheckFloating("advantages", in.advantages, bt), "advantages ([B] or [B, T])");
  if (o.kl_coef > 0 && !in.ref_logprobs.defined())
    return InvalidArgument("ref_logprobs: required when kl_coef > 0 (kl_coef = " + std::to_string(o.kl_coef) + ")");
  if (o.entropy_coef > 0 && !in.entropy.defined())
    return InvalidArgument("entropy: required when entropy_coef > 0 (entropy_coef = " +
                           std::to_string(o.entropy_coef) + ")");
  if (in.ref_logprobs.defined()) TANDEM_RETURN_IF_ERROR(CheckFloating("ref_logprobs", in.ref_logprobs, bt));
  if (in.entropy.defined()) TANDEM_RETURN_IF_ERROR(CheckFloating("entropy", in.entropy, bt));
  TANDEM_RETURN_IF_ERROR(CheckDevice("old_logprobs", in.old_logprobs, dev));
  TANDEM_RETURN_IF_ERROR(CheckDevice("advantages", in.advantages, dev));
  TANDEM_RETURN_IF_ERROR(CheckDevice("mask", in.mask, dev));
  if (in.ref_logprobs.defined()) TANDEM_RETURN_IF_ERROR(CheckDevice("ref_logprobs", in.ref_logprobs, dev));
  if (in.entropy.defined()) TANDEM_RETURN_IF_ERROR(CheckDevice("entropy", in.entropy, dev));

  return GuardTorch("policy loss", [&]() -> StatusOr<PolicyLossOutput> {
    const at::ScalarType type =
        ComputeType({in.logprobs, in.old_logprobs, in.advantages, in.ref_logprobs, in.entropy});
    const at::TensorOptions opts = in.logprobs.options().dtype(type);
    const at::Tensor zero = at::scalar_tensor(0.0, opts);
    const at::Tensor m = in.mask != 0;
    const at::Tensor maskf = m.to(type);
    // Masked positions are replaced before any arithmetic, so padding that
    // holds NaN or inf reaches neither the loss nor any gradient.
    auto clean = [&](const at::Tensor& t) { return at::where(m, t.to(type), zero); };
    const at::Tensor logp = clean(in.logprobs);
    const at::Tensor old = clean(in.old_logprobs.detach());
    const at::Tensor adv_bt = in.advantages.dim() == 1 ? in.advantages.detach().unsqueeze(1).expand(bt)
                                                       : in.advantages.detach();
    const at::Tensor adv = clean(adv_bt);
    const AggregationScale scale{in.batch_tokens, in.batch_sequences, o.max_response_length};
    auto agg = [&](const at::Tensor& per_token) {
      return internal::AggregateUnchecked(per_token, maskf, o.aggregation, scale);
    };

    const at::Tensor log_ratio = at::clamp(logp - old, -20.0, 20.0);
    const at::Tensor ratio = at::exp(log_ratio);
    const at::Tensor loss_unclipped = -adv * ratio;
    const at::Tensor loss_clipped = -adv * at::clamp(ratio, 1.0 - o.clip_ratio_low, 1.0 + o.clip_ratio_high);
    const at::Tensor loss_clip = at::maximum(loss_unclipped, loss_clipped);
    at::Tensor per_token = loss_clip;
    at::Tensor dual_cap;
    if (o.clip_ratio_c) {
      dual_cap = -adv * *o.clip_ratio_c;
      per_token = at::where(adv < 0, at::minimum(loss_clip, dual_cap), loss_clip);
    }
    // Masked positions hold 0 (adv = 0 there); the where keeps it exact.
    per_token = at::where(m, per_token, zero);

    PolicyLossOutput out;
    const at::Tensor pg = agg(per_token);
    at::Tensor loss = pg;
    at::Tensor kl_per_token;
    if (in.ref_logprobs.defined()) {
      kl_per_token = at::where(m, internal::TokenKlUnchecked(logp, clean(in.ref_logprobs.detach()), o.kl_estimator),
                               zero);
      const at::Tensor kl = agg(kl_per_token);
      if (o.kl_coef > 0) loss = loss + o.kl_coef * kl;
      out.metrics.kl_loss = kl.detach();
    }
    at::Tensor ent;
    if (in.entropy.defined()) {
      ent = clean(in.entropy);
      const at::Tensor ent_agg = agg(ent);
      if (o.entropy_coef > 0) loss = loss - o.entropy_coef * ent_agg;
      out.metrics.entropy_loss = ent_agg.detach();
    }
    out.loss = loss;

    {
      c10::AutoGradMode no_grad(false);
      const at::Tensor n = maskf.sum();
      const at::Tensor denom = at::clamp_min(n, 1.0);
      auto token_mean = [&](const at::Tensor& t) { return (t.detach() * maskf).sum() / denom; };
      auto fraction = [&](const at::Tensor& cond) { return (cond & m).to(type).sum() / denom; };
      PolicyLossMetrics& mt = out.metrics;
      mt.pg_loss = pg.detach();
      mt.tokens = n;
      if (kl_per_token.defined()) mt.ref_kl_mean = token_mean(kl_per_token);
      if (ent.defined()) mt.entropy_mean = token_mean(ent);
      const at::Tensor r = ratio.detach();
      mt.clip_frac_high = fraction((adv > 0) & (r > 1.0 + o.clip_ratio_high));
      mt.clip_frac_low = fraction((adv < 0) & (r < 1.0 - o.clip_ratio_low));
      mt.dual_clip_frac = o.clip_ratio_c ? fraction((adv < 0) & (r > *o.clip_ratio_c)) : zero.clone();
      mt.approx_kl = token_mean(old - logp.detach());
      mt.ratio_mean = token_mean(r);
      if (r.numel() == 0) {
        mt.ratio_max = zero.clone();
      } else {
        const at::Tensor masked_max = at::where(m, r, at::scalar_tensor(-kInf, opts)).max();
        mt.ratio_max = at::where(n > 0, masked_max, zero);
      }
    }
    return out;
  });
}

}  // namespace tandem::rl
