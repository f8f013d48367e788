// The MOPD loss (distill_loss.h).
#include "workers/rl/distill_loss.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/clamp_max.h>
#include <ATen/ops/clamp_min.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/where.h>
#include <c10/core/GradMode.h>

#include <cmath>

#include "workers/rl/loss_aggregation.h"
#include "workers/rl/tensor_args.h"

namespace tandem::rl {

Status Validate(const DistillLossOptions& o) {
  if (!std::isfinite(o.ratio_cap) || o.ratio_cap < 1)
    return InvalidArgument("ratio_cap: expected a finite number >= 1, got " + std::to_string(o.ratio_cap));
  return Status::Ok();
}

std::vector<std::string> DistillLossMetrics::Names() {
  return {"distill_loss", "teacher_log_ratio", "ratio_capped_frac", "tokens",
          "topk_loss", "topk_teacher_mass", "topk_student_mass"};
}

std::vector<std::pair<std::string, double>> DistillLossMetrics::ToHost() const {
  return ScalarsToHost({{"distill_loss", &distill_loss},
                        {"teacher_log_ratio", &teacher_log_ratio},
                        {"ratio_capped_frac", &ratio_capped_frac},
                        {"tokens", &tokens},
                        {"topk_loss", &topk_loss},
                        {"topk_teacher_mass", &topk_teacher_mass},
                        {"topk_student_mass", &topk_student_mass}});
}

StatusOr<DistillLossOutput> ComputeDistillLoss(const DistillLossInputs& in, const DistillLossOptions& o) {
  TANDEM_RETURN_IF_ERROR(Validate(o));
  TANDEM_RETURN_IF_ERROR(Validate(AggregationScale{in.batch_tokens, 0, 0}));
  TANDEM_RETURN_IF_ERROR(CheckFloatingRank("logprobs", in.logprobs, 2));
  const at::IntArrayRef bt = in.logprobs.sizes();
  const at::Device dev = in.logprobs.device();
  TANDEM_RETURN_IF_ERROR(CheckFloating("old_logprobs", in.old_logprobs, bt));
  TANDEM_RETURN_IF_ERROR(CheckMask("mask", in.mask, bt));
  TANDEM_RETURN_IF_ERROR(CheckFloatingRank("teacher_logprobs", in.teacher_logprobs, 3), "teacher_logprobs ([K, B, T])");
  const int64_t k = in.teacher_logprobs.size(0);
  if (k < 1) return InvalidArgument("teacher_logprobs: expected at least one teacher, got [0, ...]");
  TANDEM_RETURN_IF_ERROR(CheckFloating("teacher_logprobs", in.teacher_logprobs, {k, bt[0], bt[1]}));
  TANDEM_RETURN_IF_ERROR(CheckFloating("route", in.route, {bt[0], k}), "route ([B, K])");
  const bool top = in.teacher_top_logprobs.defined() || in.top_logprobs.defined();
  if (top) {
    TANDEM_RETURN_IF_ERROR(CheckFloatingRank("teacher_top_logprobs", in.teacher_top_logprobs, 4),
                           "teacher_top_logprobs ([K, B, T, k])");
    const int64_t top_k = in.teacher_top_logprobs.size(3);
    if (top_k < 1) return InvalidArgument("teacher_top_logprobs: expected k >= 1, got [..., 0]");
    TANDEM_RETURN_IF_ERROR(CheckFloating("teacher_top_logprobs", in.teacher_top_logprobs, {k, bt[0], bt[1], top_k}));
    TANDEM_RETURN_IF_ERROR(CheckFloating("top_logprobs", in.top_logprobs, {k, bt[0], bt[1], top_k}));
    TANDEM_RETURN_IF_ERROR(CheckDevice("teacher_top_logprobs", in.teacher_top_logprobs, dev));
    TANDEM_RETURN_IF_ERROR(CheckDevice("top_logprobs", in.top_logprobs, dev));
  }
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"old_logprobs", &in.old_logprobs},
                                {"teacher_logprobs", &in.teacher_logprobs},
                                {"route", &in.route},
                                {"mask", &in.mask}})
    TANDEM_RETURN_IF_ERROR(CheckDevice(name, *t, dev));

  return GuardTorch("distill loss", [&]() -> StatusOr<DistillLossOutput> {
    const at::ScalarType type = ComputeType({in.logprobs, in.old_logprobs, in.teacher_logprobs, in.route});
    const at::Tensor w = in.route.detach().to(type);  // [B, K]
    {
      c10::AutoGradMode no_grad(false);
      if (!(at::isfinite(w).all().item<bool>() && (w >= 0).all().item<bool>()))
        return InvalidArgument("route: expected finite weights >= 0");
    }
    const at::TensorOptions opts = in.logprobs.options().dtype(type);
    const at::Tensor zero = at::scalar_tensor(0.0, opts);
    const at::Tensor weight = w.sum(1).unsqueeze(1);                       // W, [B, 1]
    const at::Tensor counted = (in.mask != 0) & (weight > 0);              // [B, T]
    const at::Tensor maskf = counted.to(type);
    // Replaced before any arithmetic: padding and unscored teacher tokens
    // may hold NaN or inf.
    auto clean = [&](const at::Tensor& t) { return at::where(counted, t.to(type), zero); };
    const at::Tensor logp = clean(in.logprobs);
    const at::Tensor sg = logp.detach();
    const at::Tensor old = clean(in.old_logprobs.detach());
    const at::Tensor wk = w.transpose(0, 1).unsqueeze(2);                  // [K, B, 1]
    const at::Tensor scored = (wk > 0) & counted.unsqueeze(0);             // [K, B, T]
    const at::Tensor lt = at::where(scored, in.teacher_logprobs.detach().to(type), zero);
    const at::Tensor s = (wk * lt).sum(0);                                 // S, [B, T]
    const at::Tensor r = at::where(counted, s - weight * sg, zero);
    const at::Tensor log_ratio = sg - old;
    const at::Tensor rho = at::exp(at::clamp_max(log_ratio, std::log(o.ratio_cap)));
    const at::Tensor per_token = at::where(counted, -rho * at::exp(logp - sg) * r, zero);

    DistillLossOutput out;
    const AggregationScale scale{in.batch_tokens, 0, 0};
    out.loss = internal::AggregateUnchecked(per_token, maskf, LossAggregation::kTokenMean, scale);
    at::Tensor teacher_mass, student_mass;  // [B, T], route-weighted sums over j
    if (top) {
      const at::Tensor scored4 = scored.unsqueeze(3);  // [K, B, T, 1]
      const at::Tensor lq = at::where(scored4, in.teacher_top_logprobs.detach().to(type), zero);
      const at::Tensor lp = at::where(scored4, in.top_logprobs.to(type), zero);
      const at::Tensor q = at::where(scored4, at::exp(lq), zero);
      const at::Tensor wk4 = wk.unsqueeze(3);          // [K, B, 1, 1]
      const at::Tensor d = (wk4 * q * (lq - lp)).sum(3).sum(0);  // [B, T]
      out.topk_loss = internal::AggregateUnchecked(at::where(counted, d, zero), maskf, LossAggregation::kTokenMean, scale);
      c10::AutoGradMode no_grad(false);
      teacher_mass = (wk4 * q).sum(3).sum(0);
      student_mass = (wk4 * at::where(scored4, at::exp(lp.detach()), zero)).sum(3).sum(0);
    }
    {
      c10::AutoGradMode no_grad(false);
      const at::Tensor n = maskf.sum();
      const at::Tensor denom = at::clamp_min(n, 1.0);
      DistillLossMetrics& mt = out.metrics;
      mt.distill_loss = out.loss.detach();
      mt.teacher_log_ratio = (at::where(counted, -r / at::clamp_min(weight, 1e-30), zero)).sum() / denom;
      mt.ratio_capped_frac = ((log_ratio > std::log(o.ratio_cap)) & counted).to(type).sum() / denom;
      mt.tokens = n;
      if (top) {
        const at::Tensor per_w = at::clamp_min(weight, 1e-30);
        mt.topk_loss = out.topk_loss.detach();
        mt.topk_teacher_mass = at::where(counted, teacher_mass / per_w, zero).sum() / denom;
        mt.topk_student_mass = at::where(counted, student_mass / per_w, zero).sum() / denom;
      }
    }
    return out;
  });
}

}  // namespace tandem::rl
