// The fused decoder glue on CUDA (fused.h's math with GlueRounding::kBf16):
// bf16 tensors, fp32 math, fp32 grad_weight. Every pointer is device memory,
// 4-byte aligned, rows contiguous; residual and sum_out are null together;
// grad_h may be null. The backward passes need a workspace of
// *BackwardWorkspaceBytes (grad_weight partial sums). Launches on `stream`;
// InvalidArgument for a bad shape, pointer or workspace, Internal for a
// failed launch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "kernels/fused/fused.h"

namespace tandem::kernels {

Status RmsNormForwardCuda(const RmsNormShape& s, const __nv_bfloat16* x, const __nv_bfloat16* residual,
                          const __nv_bfloat16* weight, __nv_bfloat16* sum_out, __nv_bfloat16* y,
                          cudaStream_t stream);
size_t RmsNormBackwardWorkspaceBytes(const RmsNormShape& s);
Status RmsNormBackwardCuda(const RmsNormShape& s, const __nv_bfloat16* h, const __nv_bfloat16* weight,
                           const __nv_bfloat16* grad_y, const __nv_bfloat16* grad_h, __nv_bfloat16* grad_in,
                           float* grad_weight, void* workspace, size_t workspace_bytes, cudaStream_t stream);

Status QkNormRotaryForwardCuda(const QkRotaryShape& s, const __nv_bfloat16* x, const __nv_bfloat16* weight,
                               const __nv_bfloat16* cos, const __nv_bfloat16* sin, __nv_bfloat16* y,
                               cudaStream_t stream);
size_t QkNormRotaryBackwardWorkspaceBytes(const QkRotaryShape& s);
Status QkNormRotaryBackwardCuda(const QkRotaryShape& s, const __nv_bfloat16* x, const __nv_bfloat16* weight,
                                const __nv_bfloat16* cos, const __nv_bfloat16* sin, const __nv_bfloat16* grad_y,
                                __nv_bfloat16* grad_x, float* grad_weight, void* workspace, size_t workspace_bytes,
                                cudaStream_t stream);

Status SwigluForwardCuda(int64_t n, const __nv_bfloat16* gate, const __nv_bfloat16* up, __nv_bfloat16* y,
                         cudaStream_t stream);
Status SwigluBackwardCuda(int64_t n, const __nv_bfloat16* gate, const __nv_bfloat16* up,
                          const __nv_bfloat16* grad_y, __nv_bfloat16* grad_gate, __nv_bfloat16* grad_up,
                          cudaStream_t stream);

}  // namespace tandem::kernels
