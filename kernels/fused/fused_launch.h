// Internal: the CUDA kernels of the fused decoder glue (fused.cu), plain
// types and cudaError_t; argument checks and workspace in fused_cuda.cc.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::kernels::detail {

// Rows of the backward kernels' grad_weight partial sums ([blocks, cols]
// fp32 workspace) for `rows` rows of `cols`.
int FusedNormBackwardBlocks(int64_t rows, int cols);

// residual and sum_out null together (no residual add).
cudaError_t LaunchRmsNormForward(int64_t rows, int cols, float eps, const __nv_bfloat16* x,
                                 const __nv_bfloat16* residual, const __nv_bfloat16* weight, __nv_bfloat16* sum_out,
                                 __nv_bfloat16* y, cudaStream_t s);
// grad_h may be null; partial: [FusedNormBackwardBlocks, cols] fp32.
cudaError_t LaunchRmsNormBackward(int64_t rows, int cols, float eps, const __nv_bfloat16* h,
                                  const __nv_bfloat16* weight, const __nv_bfloat16* grad_y,
                                  const __nv_bfloat16* grad_h, __nv_bfloat16* grad_in, float* partial,
                                  float* grad_weight, cudaStream_t s);
cudaError_t LaunchQkNormRotaryForward(int64_t tokens, int heads, int dim, float eps, const __nv_bfloat16* x,
                                      const __nv_bfloat16* weight, const __nv_bfloat16* cos,
                                      const __nv_bfloat16* sin, __nv_bfloat16* y, cudaStream_t s);
cudaError_t LaunchQkvRotaryKvWrite(int64_t tokens, int q_heads, int kv_heads, int dim, int64_t row_stride,
                                   int64_t num_slots, float eps, const __nv_bfloat16* qkv,
                                   const __nv_bfloat16* q_weight, const __nv_bfloat16* k_weight,
                                   const __nv_bfloat16* cos, const __nv_bfloat16* sin, const int64_t* slots,
                                   __nv_bfloat16* q_out, __nv_bfloat16* key_slots, __nv_bfloat16* value_slots,
                                   cudaStream_t s);
cudaError_t LaunchQkNormRotaryBackward(int64_t tokens, int heads, int dim, float eps, const __nv_bfloat16* x,
                                       const __nv_bfloat16* weight, const __nv_bfloat16* cos,
                                       const __nv_bfloat16* sin, const __nv_bfloat16* grad_y,
                                       __nv_bfloat16* grad_x, float* partial, float* grad_weight, cudaStream_t s);
cudaError_t LaunchSwigluForward(int64_t n, const __nv_bfloat16* gate, const __nv_bfloat16* up, __nv_bfloat16* y,
                                cudaStream_t s);
cudaError_t LaunchSwigluPackedForward(int64_t rows, int64_t inter, const __nv_bfloat16* gate_up,
                                      __nv_bfloat16* y, cudaStream_t s);
cudaError_t LaunchSwigluBackward(int64_t n, const __nv_bfloat16* gate, const __nv_bfloat16* up,
                                 const __nv_bfloat16* grad_y, __nv_bfloat16* grad_gate, __nv_bfloat16* grad_up,
                                 cudaStream_t s);

}  // namespace tandem::kernels::detail
