// Tree attention over a packed forest: CPU oracle and CPU implementation
// (issue #4, "Tree attention"; forest.h has the mask model).
//
// Layouts (row-major): q [T, Hq, D]; k, v [T, Hkv, D]; out [T, Hq, D];
// lse [Hq, T] (natural-log sum of exp of the scaled scores, fp32). Hq is a
// multiple of Hkv (GQA: query head h reads kv head h / (Hq / Hkv)). Causal
// along the trie: query q sees key k iff k is q or an ancestor of q.
// The CUDA version (tree_attention_cuda.h) takes the same layouts in bf16.
#pragma once

#include <cstdint>

#include "common/status.h"
#include "kernels/tree_attention/forest.h"

namespace tandem::kernels {

struct TreeAttentionShape {
  int32_t num_tokens = 0;
  int32_t num_q_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  float scale = 0.f;  // usually 1/sqrt(head_dim)
};

// Heads positive, Hq % Hkv == 0, head_dim > 0, scale finite and > 0.
Status CheckTreeAttentionShape(const TreeAttentionShape& shape);

// --- Oracle: the plain definition, fp32 in/out, fp64 accumulation. It walks
// the segment table itself (not the plan), so it also checks the plan.
void TreeAttentionForwardRef(const Forest& forest, const TreeAttentionShape& shape, const float* q,
                             const float* k, const float* v, float* out, float* lse);
// Gradients of sum(out * dout) with respect to q, k, v.
void TreeAttentionBackwardRef(const Forest& forest, const TreeAttentionShape& shape, const float* q,
                              const float* k, const float* v, const float* dout, float* dq, float* dk,
                              float* dv);

// --- CPU implementation: tiled over the plan, multi-threaded, fp32.
// `threads` <= 0 picks the hardware concurrency.
Status TreeAttentionForwardCpu(const TreeAttentionPlan& plan, const TreeAttentionShape& shape, const float* q,
                               const float* k, const float* v, float* out, float* lse, int threads = 0);
// Needs out and lse of the forward. dq, dk, dv are overwritten.
Status TreeAttentionBackwardCpu(const TreeAttentionPlan& plan, const TreeAttentionShape& shape, const float* q,
                                const float* k, const float* v, const float* out, const float* lse,
                                const float* dout, float* dq, float* dk, float* dv, int threads = 0);

}  // namespace tandem::kernels
