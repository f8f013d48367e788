// The decoder's layers (layers.h), on ATen and the workers/ops autograd ops.
#include "workers/model/layers.h"

// IValue complete before ATen.h: clang 14 in C++20 rejects ATen.h alone.
#include <ATen/core/ivalue.h>
#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <utility>

#include "kernels/fused/fused.h"
#include "workers/ops/fused_ops.h"
#include "workers/ops/moe_ops.h"

namespace tandem::model {

namespace {

// HF's formula in ATen ops, for the shapes the fused kernels do not take.
at::Tensor RmsNormAten(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor var = xf.pow(2).mean(-1, /*keepdim=*/true);
  return weight * (xf * at::rsqrt(var + eps)).to(x.scalar_type());
}

}  // namespace

// An even width, at most kFusedCudaMaxCols.
bool FusedNormWidth(int64_t cols) { return cols % 2 == 0 && cols <= kernels::kFusedCudaMaxCols; }

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  if (!FusedNormWidth(x.size(-1))) return RmsNormAten(x, weight, eps);
  return ops::RmsNorm(x, weight, eps);
}

ResidualNorm AddRmsNorm(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& weight, double eps) {
  if (!FusedNormWidth(x.size(-1))) {
    at::Tensor sum = x + delta;
    at::Tensor normed = RmsNormAten(sum, weight, eps);
    return {std::move(sum), std::move(normed)};
  }
  ops::AddRmsNormOutput out = ops::AddRmsNorm(x, delta, weight, eps);
  return {std::move(out.sum), std::move(out.normed)};
}

at::Tensor RotaryInvFreq(int64_t head_dim, double theta, at::Device device) {
  // As HF: arange(0, D, 2) as int64 -> float, / D, theta ** that, 1 / that, all fp32.
  const at::Tensor exponent = at::arange(0, head_dim, 2, at::TensorOptions().dtype(at::kLong)).to(at::kFloat) /
                              static_cast<double>(head_dim);
  return (1.0 / at::pow(theta, exponent)).to(device);
}

RotaryAngles RotaryCosSin(const at::Tensor& inv_freq, const at::Tensor& positions, at::ScalarType dtype) {
  const at::Tensor freqs = positions.to(at::kFloat).unsqueeze(1) * inv_freq.unsqueeze(0);  // [N, D/2]
  const at::Tensor emb = at::cat({freqs, freqs}, -1);
  return {emb.cos().to(dtype), emb.sin().to(dtype)};
}

at::Tensor ApplyRotary(const at::Tensor& x, const RotaryAngles& a) {
  const int64_t half = x.size(-1) / 2;
  const at::Tensor rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * a.cos.unsqueeze(1) + rotated * a.sin.unsqueeze(1);
}

Qkv ProjectQkv(const at::Tensor& h, const AttentionWeights& w, const AttentionShape& s, const RotaryAngles& angles) {
  const int64_t n = h.size(0);
  at::Tensor q = at::linear(h, w.q_proj).view({n, s.heads, s.head_dim});
  at::Tensor k = at::linear(h, w.k_proj).view({n, s.kv_heads, s.head_dim});
  at::Tensor v = at::linear(h, w.v_proj).view({n, s.kv_heads, s.head_dim});
  if (s.head_dim % 4 == 0 && FusedNormWidth(s.head_dim)) {
    q = ops::QkNormRotary(q, w.q_norm, angles.cos, angles.sin, s.eps);
    k = ops::QkNormRotary(k, w.k_norm, angles.cos, angles.sin, s.eps);
  } else {
    q = ApplyRotary(RmsNorm(q, w.q_norm, s.eps), angles);
    k = ApplyRotary(RmsNorm(k, w.k_norm, s.eps), angles);
  }
  return {q, k, v};
}

at::Tensor OutputProjection(const at::Tensor& attn, const AttentionWeights& w) {
  return at::linear(attn.reshape({attn.size(0), attn.size(1) * attn.size(2)}), w.o_proj);
}

at::Tensor ForestAttention(const Qkv& qkv, const c10::intrusive_ptr<ops::TreeForest>& forest) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(qkv.q.size(2)));
  return ops::TreeAttention(qkv.q, qkv.k, qkv.v, forest, scale);
}

at::Tensor DecodeAttention(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                           const at::Tensor& visible) {
  TORCH_CHECK(q.dim() == 3 && keys.dim() == 4 && values.sizes() == keys.sizes(),
              "DecodeAttention: q [B, Hq, D], keys and values [B, S, Hkv, D] expected, got ", q.sizes(), " and ",
              keys.sizes());
  const int64_t b = q.size(0), hq = q.size(1), d = q.size(2), s = keys.size(1), hkv = keys.size(2);
  TORCH_CHECK(keys.size(0) == b && keys.size(3) == d && hq % hkv == 0,
              "DecodeAttention: keys must be [", b, ", S, Hkv, ", d, "] with Hkv dividing ", hq);
  TORCH_CHECK(visible.sizes() == at::IntArrayRef({b, s}) && visible.scalar_type() == at::kBool,
              "DecodeAttention: visible must be bool [B, S]");
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const at::Tensor qg = q.to(at::kFloat).view({b, hkv, hq / hkv, d});
  at::Tensor scores = at::einsum("bhgd,bshd->bhgs", {qg, keys.to(at::kFloat)}) * scale;
  scores = scores.masked_fill(visible.logical_not().view({b, 1, 1, s}), -std::numeric_limits<double>::infinity());
  const at::Tensor p = at::softmax(scores, -1);
  return at::einsum("bhgs,bshd->bhgd", {p, values.to(at::kFloat)}).reshape({b, hq, d}).to(q.scalar_type());
}

at::Tensor DenseMlp(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& up, const at::Tensor& down) {
  return at::linear(ops::Swiglu(at::linear(x, gate), at::linear(x, up)), down);
}

MoeMlpOutput MoeMlp(const at::Tensor& x, const at::Tensor& router, const at::Tensor& w_gate_up,
                    const at::Tensor& w_down, int64_t top_k, bool norm_topk_prob) {
  const int64_t experts = router.size(0);
  const at::Tensor logits = at::linear(x, router).to(at::kFloat);
  const ops::MoeRouting r = ops::MoeRoute(logits, top_k, kernels::RouterScore::kSoftmax, norm_topk_prob);
  const ops::MoeExpertsImpl impl = ops::DefaultMoeExpertsImpl(x.device());
  const ops::MoePermutation plan =
      ops::MoePermutePlan(r.topk_idx, experts, /*host_offsets=*/impl == ops::MoeExpertsImpl::kKernels);
  const at::Tensor xp = ops::MoePermute(x, plan);
  const at::Tensor yp = ops::MoeExpertsFfn(xp, plan, w_gate_up, w_down, impl);
  return {ops::MoeUnpermute(yp, r.topk_weight, plan), {r.counts, r.score_sum, x.size(0)}};
}

at::Tensor LoadBalancingLoss(const std::vector<RouterStats>& stats, int64_t num_experts) {
  if (stats.empty()) return at::zeros({}, at::TensorOptions().dtype(at::kFloat));
  at::Tensor counts = at::zeros_like(stats[0].score_sum);
  at::Tensor score_sum = at::zeros_like(stats[0].score_sum);
  int64_t n = 0;
  for (const RouterStats& s : stats) {
    counts = counts + s.counts.to(at::kFloat);
    score_sum = score_sum + s.score_sum;
    n += s.tokens;
  }
  if (n == 0) return at::zeros({}, score_sum.options());
  const double nn = static_cast<double>(n);
  return (counts / nn * (score_sum / nn)).sum() * static_cast<double>(num_experts);
}

}  // namespace tandem::model
