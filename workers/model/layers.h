// The layers of a Qwen3 / Qwen3-MoE decoder, as functions of tensors
// (docs/model.md "The model"). Each does what HF's Qwen3 modules do, with
// the same roundings (fp32 where HF upcasts), on CPU fp32 or CUDA bf16, and
// is differentiable (ATen ops and the autograd ops of workers/ops). Shapes:
// N tokens, H hidden, Hq / Hkv heads, D head dim, E experts, k experts per
// token. Contract violations throw c10::Error.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "workers/ops/tree_attention_op.h"

namespace tandem::model {

// HF's Qwen3RMSNorm over the last dim: x in fp32, x * rsqrt(mean(x^2) + eps),
// cast back to x's dtype, times weight. The fused op (ops::RmsNorm, one
// kernel each way) when the last dim is even, else ATen ops.
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);
// Whether the fused norm ops (ops::RmsNorm, ops::AddRmsNorm) take rows of
// this width (the functions here fall back to ATen where they do not).
bool FusedNormWidth(int64_t cols);
// sum = x + delta (the residual add) and RmsNorm(sum), fused likewise.
struct ResidualNorm {
  at::Tensor sum;
  at::Tensor normed;
};
ResidualNorm AddRmsNorm(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& weight, double eps);

// Rotary embedding, HF's "default" rope: inv_freq[i] = theta^(-2i/D) (fp32,
// [D/2]); angles pos * inv_freq in fp32; cos/sin of cat(angles, angles),
// [N, D], cast to `dtype`; x' = x cos + rotate_half(x) sin in x's dtype.
at::Tensor RotaryInvFreq(int64_t head_dim, double theta, at::Device device);
struct RotaryAngles {
  at::Tensor cos;  // [N, D]
  at::Tensor sin;  // [N, D]
};
RotaryAngles RotaryCosSin(const at::Tensor& inv_freq, const at::Tensor& positions, at::ScalarType dtype);
at::Tensor ApplyRotary(const at::Tensor& x, const RotaryAngles& angles);  // x [N, heads, D]

struct AttentionWeights {
  at::Tensor q_proj, k_proj, v_proj, o_proj;  // [Hq D, H], [Hkv D, H], [Hkv D, H], [H, Hq D]
  at::Tensor q_norm, k_norm;                  // [D]
};
struct AttentionShape {
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  double eps = 1e-6;
};
struct Qkv {
  at::Tensor q;  // [N, Hq, D] after q_norm and rotary
  at::Tensor k;  // [N, Hkv, D] after k_norm and rotary
  at::Tensor v;  // [N, Hkv, D]
};
// The projections, Qwen3's per-head q_norm/k_norm, then rotary at `angles`
// (q/k norm and rotary in one fused op, ops::QkNormRotary, when head_dim is
// a multiple of 4; else RmsNorm and ApplyRotary).
Qkv ProjectQkv(const at::Tensor& h, const AttentionWeights& w, const AttentionShape& s, const RotaryAngles& angles);
// Attention output [N, Hq, D] -> o_proj -> [N, H].
at::Tensor OutputProjection(const at::Tensor& attn, const AttentionWeights& w);
// Packed forest: tree attention (ops::TreeAttention), scale 1/sqrt(D).
at::Tensor ForestAttention(const Qkv& qkv, const c10::intrusive_ptr<ops::TreeForest>& forest);
// Decode: q [B, Hq, D] against keys/values [B, S, Hkv, D] where visible [B, S]
// (bool) marks the entries each row sees; softmax in fp32; out [B, Hq, D] in
// q's dtype. Plain ATen (small S per step; the paged kernel comes later).
at::Tensor DecodeAttention(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                           const at::Tensor& visible);

// SwiGLU: down(silu(gate(x)) * up(x)); gate/up [I, H], down [H, I]; the
// activation is the fused op ops::Swiglu.
at::Tensor DenseMlp(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& up, const at::Tensor& down);

// A MoE layer's router statistics, for the load-balancing loss.
struct RouterStats {
  at::Tensor counts;     // [E] int32: tokens routed to each expert (no gradient)
  at::Tensor score_sum;  // [E] fp32: sum over tokens of softmax(router logits) (differentiable)
  int64_t tokens = 0;
};
struct MoeMlpOutput {
  at::Tensor out;  // [N, H], x's dtype
  RouterStats stats;
};
// HF's Qwen3MoeSparseMoeBlock: logits = x router^T in x's dtype, softmax in
// fp32, top-k (renormalised to sum 1 when norm_topk_prob), the chosen
// experts' SwiGLU outputs weighted and summed — through the MoE ops:
// router [E, H], w_gate_up [E, H, 2I], w_down [E, I, H] (ParameterSet slots).
// The experts' implementation is ops::DefaultMoeExpertsImpl's (on CUDA,
// TANDEM_MOE_EXPERTS=grouped-mm leaves the layer without a host sync).
MoeMlpOutput MoeMlp(const at::Tensor& x, const at::Tensor& router, const at::Tensor& w_gate_up,
                    const at::Tensor& w_down, int64_t top_k, bool norm_topk_prob);

// HF's load_balancing_loss_func (Switch Transformer) over the MoE layers of
// one forward, without an attention mask: with n = sum of tokens over the
// layers, counts and score_sum summed over the layers,
//   aux = E * sum_e (counts[e] / n) * (score_sum[e] / n).
// A scalar fp32 tensor (0 when there are no MoE layers); multiply by
// router_aux_loss_coef. Differentiable through score_sum.
at::Tensor LoadBalancingLoss(const std::vector<RouterStats>& stats, int64_t num_experts);

}  // namespace tandem::model
