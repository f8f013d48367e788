// MoE layer pieces (issue #4, "MoE"): router, permute, expert SwiGLU FFN over
// grouped rows, weighted unpermute; forward and backward. CPU oracle and CPU
// implementation here (fp32); CUDA in moe_cuda.h (bf16, fp32 accumulation).
//
// Router: logits [T, E] -> scores (softmax over experts, or sigmoid), top-k
// experts per token (ties: lower index first), weights = the chosen scores,
// optionally renormalised to sum 1 per token; statistics for a load-balancing
// loss: counts[e] (tokens routed to e) and score_sum[e] = sum_t scores[t, e]
// (e.g. Switch aux = E / (T^2 k) * sum_e counts[e] * score_sum[e]).
// Permute: the T*k (token, slot) pairs grouped by expert, stable in (t, j)
// order: offsets [E+1], perm_pos[t*k+j] = row of the pair, perm_src[row] = t*k+j.
// Expert FFN, for the rows of expert e: gu = xp W_gate_up[e] ([H, 2I]; gate is
// columns [0, I), up is [I, 2I)), act = silu(gate) * up, yp = act W_down[e] ([I, H]).
// Unpermute: out[t] = sum_j w[t, j] yp[perm_pos[t*k+j]].
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace tandem::kernels {

enum class RouterScore { kSoftmax, kSigmoid };

struct MoeShape {
  int64_t tokens = 0;  // T
  int32_t hidden = 0;  // H
  int32_t inter = 0;   // I
  int32_t experts = 0; // E
  int32_t top_k = 0;   // k <= E
  RouterScore score = RouterScore::kSoftmax;
  bool renormalize = true;
};

Status CheckMoeShape(const MoeShape& s);

struct RouterOutput {
  std::vector<float> scores;       // [T, E]
  std::vector<int32_t> topk_idx;   // [T, k]
  std::vector<float> topk_weight;  // [T, k]
  std::vector<int32_t> counts;     // [E]
  std::vector<float> score_sum;    // [E]
};

struct PermutePlan {
  std::vector<int32_t> offsets;   // [E + 1]
  std::vector<int32_t> perm_pos;  // [T * k]
  std::vector<int32_t> perm_src;  // [T * k]
};

// --- Oracle (plain loops, fp64 accumulation in the GEMMs).
RouterOutput MoeRouterRef(const MoeShape& s, const float* logits);
// grad_logits [T, E] from grad_topk_weight [T, k] and grad_score_sum [E] (nullable).
void MoeRouterBackwardRef(const MoeShape& s, const RouterOutput& r, const float* grad_topk_weight,
                          const float* grad_score_sum, float* grad_logits);
PermutePlan MoePermutePlanRef(const MoeShape& s, const int32_t* topk_idx);
// Whole layer after routing: x [T, H] -> out [T, H]; also gu [T*k, 2I], act [T*k, I].
void MoeExpertsForwardRef(const MoeShape& s, const PermutePlan& p, const float* x, const float* w_gate_up,
                          const float* w_down, const float* topk_weight, float* out);
// Gradients of sum(out * dout) for x, both weights and the routing weights.
void MoeExpertsBackwardRef(const MoeShape& s, const PermutePlan& p, const float* x, const float* w_gate_up,
                           const float* w_down, const float* topk_weight, const float* dout, float* dx,
                           float* dw_gate_up, float* dw_down, float* dtopk_weight);

// --- CPU implementation (same results, fp32, threads over experts/tokens).
StatusOr<RouterOutput> MoeRouterCpu(const MoeShape& s, const float* logits);
StatusOr<PermutePlan> MoePermutePlanCpu(const MoeShape& s, const int32_t* topk_idx);
Status MoeExpertsForwardCpu(const MoeShape& s, const PermutePlan& p, const float* x, const float* w_gate_up,
                            const float* w_down, const float* topk_weight, float* out, int threads = 0);
Status MoeExpertsBackwardCpu(const MoeShape& s, const PermutePlan& p, const float* x, const float* w_gate_up,
                             const float* w_down, const float* topk_weight, const float* dout, float* dx,
                             float* dw_gate_up, float* dw_down, float* dtopk_weight, int threads = 0);
// Row moves (moe_permute_cpu.cc), the CPU twins of moe_cuda.h's: xp[r] = x[perm_src[r] / k];
// dx[t] = sum_j dxp[perm_pos[t*k+j]]; out[t] = sum_j w[t, j] yp[perm_pos[t*k+j]], and its
// gradients dyp and dtopk_weight. `inter` is not used. An index out of range is an error.
Status MoePermuteRowsCpu(const MoeShape& s, const float* x, const int32_t* perm_src, float* xp);
Status MoePermuteRowsBackwardCpu(const MoeShape& s, const float* dxp, const int32_t* perm_pos, float* dx);
Status MoeUnpermuteCpu(const MoeShape& s, const float* yp, const float* topk_weight, const int32_t* perm_pos,
                       float* out);
Status MoeUnpermuteBackwardCpu(const MoeShape& s, const float* dout, const float* yp, const float* topk_weight,
                               const int32_t* perm_pos, float* dyp, float* dtopk_weight);

}  // namespace tandem::kernels

namespace tandem::kernels {
// CPU router backward: validates, then the oracle's closed form (cheap: T*E).
Status MoeRouterBackwardCpu(const MoeShape& s, const RouterOutput& r, const float* grad_topk_weight,
                            const float* grad_score_sum, float* grad_logits);
}  // namespace tandem::kernels
