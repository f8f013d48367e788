// Chunked LM-head loss on CUDA (issue #4; math in lm_head_loss.h). bf16
// hidden and weight; cuBLAS (bf16 in, fp32 accumulate) for the chunk GEMMs;
// own kernels for the row statistics (online max / sum / sum p z), the label
// log-probs and the logits gradient. Per chunk of `chunk_rows` rows it holds
// one fp32 logits chunk and one bf16 gradient chunk: the workspace.
// The forward reads logits once (1 GEMM); the backward recomputes them
// (3 GEMMs: logits, grad_hidden = dz W, grad_weight += dz^T hidden).
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "kernels/lm_head_loss/lm_head_loss.h"

namespace tandem::kernels {

// Bytes of workspace the CUDA forward/backward need for this chunk size.
size_t LmHeadLossWorkspaceBytes(const LmHeadLossShape& shape, int64_t chunk_rows);

// logprob [M], entropy [N] and lse [N] are fp32 (entropy may be null; lse is
// needed by the backward). rows/labels are device int32 [M]; a pair out of
// range gets a NaN logprob instead of a memory fault. The handle is used on
// `stream` (the call sets it).
Status LmHeadLossForwardCuda(cublasHandle_t handle, const LmHeadLossShape& shape, const __nv_bfloat16* hidden,
                             const __nv_bfloat16* weight, const int32_t* rows, const int32_t* labels, float* logprob,
                             float* entropy, float* lse, void* workspace, size_t workspace_bytes, int64_t chunk_rows,
                             cudaStream_t stream);

// grad_hidden [N, H] and grad_weight [V, H] fp32, overwritten. grad_logprob
// [M] or grad_entropy [N] may be null (zero). Needs lse and entropy.
Status LmHeadLossBackwardCuda(cublasHandle_t handle, const LmHeadLossShape& shape, const __nv_bfloat16* hidden,
                              const __nv_bfloat16* weight, const int32_t* rows, const int32_t* labels,
                              const float* lse, const float* entropy, const float* grad_logprob,
                              const float* grad_entropy, float* grad_hidden, float* grad_weight, void* workspace,
                              size_t workspace_bytes, int64_t chunk_rows, cudaStream_t stream);

}  // namespace tandem::kernels
