// MoE on CUDA (issue #4; definitions in moe.h). bf16 activations and weights,
// fp32 router, statistics and weight gradients; raw device pointers, shapes,
// a stream and, for the GEMMs, a cuBLAS handle.
//
// The expert GEMMs run through cuBLAS: kGrouped issues one grouped-batched
// call per GEMM shape (cublasGemmGroupedBatchedEx) over the non-empty experts,
// kPerExpertLoop one cublasGemmEx per expert (the baseline). Both need the
// expert offsets on the host: MoeOffsetsToHost copies them (one stream sync).
// Everything else is this library's kernels: router (warp per token), a
// deterministic counting-sort permutation (stable in (token, slot) order),
// 16-byte row gathers, weighted unpermute, SwiGLU, and their backwards.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "kernels/moe/moe.h"

namespace tandem::kernels {

using bf16 = __nv_bfloat16;

// logits [T, E] fp32 -> scores [T, E], topk_idx/topk_weight [T, k], counts [E]
// (int32) and score_sum [E] (fp32, atomics: summation order varies).
Status MoeRouterCuda(const MoeShape& s, const float* logits, float* scores, int32_t* topk_idx, float* topk_weight,
                     int32_t* counts, float* score_sum, cudaStream_t stream);
// grad_logits [T, E]; grad_score_sum may be null.
Status MoeRouterBackwardCuda(const MoeShape& s, const float* scores, const int32_t* topk_idx,
                             const float* topk_weight, const float* grad_topk_weight, const float* grad_score_sum,
                             float* grad_logits, cudaStream_t stream);

size_t MoePermuteWorkspaceBytes(const MoeShape& s);
// offsets [E+1], perm_pos [T*k], perm_src [T*k] (moe.h). Experts out of range
// are counted nowhere and their rows get perm_pos -1 (no memory fault).
Status MoePermutePlanCuda(const MoeShape& s, const int32_t* topk_idx, int32_t* offsets, int32_t* perm_pos,
                          int32_t* perm_src, void* workspace, size_t workspace_bytes, cudaStream_t stream);
StatusOr<std::vector<int32_t>> MoeOffsetsToHost(const MoeShape& s, const int32_t* offsets, cudaStream_t stream);

// xp[r] = x[perm_src[r] / k]; and its backward dx[t] = sum_j dxp[perm_pos[t*k+j]].
Status MoePermuteRowsCuda(const MoeShape& s, const bf16* x, const int32_t* perm_src, bf16* xp, cudaStream_t stream);
Status MoePermuteRowsBackwardCuda(const MoeShape& s, const bf16* dxp, const int32_t* perm_pos, bf16* dx,
                                  cudaStream_t stream);
// out[t] = sum_j w[t,j] yp[perm_pos[t*k+j]]; backward: dyp and dtopk_weight.
Status MoeUnpermuteCuda(const MoeShape& s, const bf16* yp, const float* topk_weight, const int32_t* perm_pos,
                        bf16* out, cudaStream_t stream);
Status MoeUnpermuteBackwardCuda(const MoeShape& s, const bf16* dout, const bf16* yp, const float* topk_weight,
                                const int32_t* perm_pos, bf16* dyp, float* dtopk_weight, cudaStream_t stream);

// kAuto: the loop when the average expert GEMM is large (>= 4 GFLOP; there
// cuBLAS's per-GEMM kernels beat its grouped path: 446 vs 239 TFLOP/s at
// H=7168 I=2048, 256 rows per expert, H200 2026-11-30), else grouped (227 vs
// 101 at H=2048 I=768, where the loop is launch-bound).
enum class MoeGemm { kPerExpertLoop, kGrouped, kAuto };

// Expert FFN over the permuted rows: gu [T*k, 2I], act [T*k, I] (kept for the
// backward) and yp [T*k, H]. w_gate_up [E, H, 2I], w_down [E, I, H].
Status MoeExpertsForwardCuda(cublasHandle_t h, const MoeShape& s, const std::vector<int32_t>& host_offsets,
                             const bf16* xp, const bf16* w_gate_up, const bf16* w_down, bf16* gu, bf16* act, bf16* yp,
                             cudaStream_t stream, MoeGemm gemm = MoeGemm::kAuto);
// dxp [T*k, H] bf16; dw_gate_up [E, H, 2I] and dw_down [E, I, H] fp32
// (overwritten, zero for empty experts); dgu [T*k, 2I] and dact [T*k, I] bf16
// are scratch.
Status MoeExpertsBackwardCuda(cublasHandle_t h, const MoeShape& s, const std::vector<int32_t>& host_offsets,
                              const bf16* xp, const bf16* w_gate_up, const bf16* w_down, const bf16* gu,
                              const bf16* act, const bf16* dyp, bf16* dxp, float* dw_gate_up, float* dw_down,
                              bf16* dgu, bf16* dact, cudaStream_t stream, MoeGemm gemm = MoeGemm::kAuto);

}  // namespace tandem::kernels
