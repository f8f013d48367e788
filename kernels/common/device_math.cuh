// Device helpers the CUDA kernels share: butterfly warp reductions (every
// lane gets the result, summed in the same order on every lane), the round
// to bf16 at the points fused.h names, and the sigmoid of SwiGLU.
#pragma once

#include <cuda_bf16.h>

namespace tandem::kernels::detail {

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// x rounded to the nearest bf16 (ties to even), as a float.
__device__ __forceinline__ float Rb(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

__device__ __forceinline__ float Sigmoid(float g) { return 1.f / (1.f + __expf(-g)); }

}  // namespace tandem::kernels::detail
