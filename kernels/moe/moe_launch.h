// Internal: MoE kernel launchers (moe.cu), plain types; checks and the GEMM
// orchestration live in moe_cuda.cc.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::kernels::detail {

cudaError_t LaunchRouter(int64_t T, int32_t E, int32_t K, bool sigmoid, bool renorm, const float* logits,
                         float* scores, int32_t* topk_idx, float* topk_weight, int32_t* counts, float* score_sum,
                         cudaStream_t s);
cudaError_t LaunchRouterBackward(int64_t T, int32_t E, int32_t K, bool sigmoid, bool renorm, const float* scores,
                                 const int32_t* topk_idx, const float* topk_weight, const float* gw, const float* gsum,
                                 float* grad_logits, cudaStream_t s);
// Workspace: int32 [num_chunks * E] for the per-chunk counts.
int64_t PermuteChunks(int64_t n);
cudaError_t LaunchPermutePlan(int64_t n, int32_t E, const int32_t* topk_idx, int32_t* offsets, int32_t* perm_pos,
                              int32_t* perm_src, int32_t* chunk_counts, cudaStream_t s);
cudaError_t LaunchGatherRows(int64_t rows, int32_t H, int32_t K, const __nv_bfloat16* x, const int32_t* perm_src,
                             __nv_bfloat16* xp, cudaStream_t s);
cudaError_t LaunchSumRows(int64_t T, int32_t H, int32_t K, const __nv_bfloat16* src, const float* weight,
                          const int32_t* perm_pos, __nv_bfloat16* out, cudaStream_t s);
cudaError_t LaunchUnpermuteBackward(int64_t T, int32_t H, int32_t K, const __nv_bfloat16* dout,
                                    const __nv_bfloat16* yp, const float* topk_weight, const int32_t* perm_pos,
                                    __nv_bfloat16* dyp, float* dtopk_weight, cudaStream_t s);
cudaError_t LaunchSwiglu(int64_t rows, int32_t I, const __nv_bfloat16* gu, __nv_bfloat16* act, cudaStream_t s);
cudaError_t LaunchSwigluBackward(int64_t rows, int32_t I, const __nv_bfloat16* gu, const __nv_bfloat16* dact,
                                 __nv_bfloat16* dgu, cudaStream_t s);

}  // namespace tandem::kernels::detail
