// Internal: the elementwise/reduction kernels of the chunked LM-head loss
// (lm_head_loss.cu), plain types; orchestration in lm_head_loss_cuda.cc.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::kernels::detail {

// lse[r] and entropy[r] for rows [0, rows) of a fp32 logits chunk [rows, V].
cudaError_t LaunchRowStats(const float* logits, int64_t rows, int32_t V, float inv_t, float* lse, float* entropy,
                           cudaStream_t s);
// logprob[i] = dot(hidden[rows[i]], weight[labels[i]]) * inv_t - lse[rows[i]].
cudaError_t LaunchPairLogprob(const __nv_bfloat16* hidden, const __nv_bfloat16* weight, const int32_t* rows,
                              const int32_t* labels, int64_t M, int64_t N, int32_t H, int32_t V, float inv_t,
                              const float* lse, float* logprob, cudaStream_t s);
// gsum[rows[i]] += g[i] (gsum zeroed by the caller).
cudaError_t LaunchGradSum(const int32_t* rows, const float* g, int64_t M, int64_t N, float* gsum, cudaStream_t s);
// dz chunk (bf16) for rows [r0, r0+rows) from their fp32 logits chunk, then
// the label terms of the pairs whose row is in the chunk.
cudaError_t LaunchLogitsGrad(const float* logits, int64_t r0, int64_t rows, int32_t V, float inv_t, const float* lse,
                             const float* entropy, const float* gsum, const float* grad_entropy,
                             const int32_t* pair_rows, const int32_t* labels, const float* grad_logprob, int64_t M,
                             __nv_bfloat16* dz, cudaStream_t s);

}  // namespace tandem::kernels::detail
