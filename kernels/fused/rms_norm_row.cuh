// RMSNorm of one row by a whole block (fused.h's formula and bf16
// roundings), shared by fused.cu's few-rows kernel and the decode GEMV's
// norm prologue (kernels/decode_gemv), so both give the same bits:
//   h = x, or round(x + res), stored to h_out and, when given, h_copy;
//   y = round(w * round(h * rstd)), rstd = 1 / sqrt(mean(h^2) + eps).
// Each thread handles the column pairs 2 * threadIdx.x + 2k * blockDim.x in
// both passes, so h_out may alias y (a thread reads its h back before it
// writes y there). h_out is unused without res (h is x). warp_sums: shared
// memory for blockDim.x / 32 floats. Every thread of the block must call
// it; it begins and ends with the block in step (one barrier between the
// passes, one after). cols even, pointers 4-byte aligned.
#pragma once

#include <cuda_bf16.h>

#include "kernels/common/device_math.cuh"

namespace tandem::kernels::detail {

__device__ __forceinline__ void RmsNormRow(int cols, float eps, const __nv_bfloat16* x, const __nv_bfloat16* res,
                                           const __nv_bfloat16* w, __nv_bfloat16* h_out, __nv_bfloat16* h_copy,
                                           __nv_bfloat16* y, float* warp_sums) {
  using bf162 = __nv_bfloat162;
  const int warps = blockDim.x / 32, lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  const __nv_bfloat16* h = res != nullptr ? h_out : x;
  float ss = 0.f;
  for (int c = 2 * threadIdx.x; c < cols; c += 2 * blockDim.x) {
    float2 hf = __bfloat1622float2(*reinterpret_cast<const bf162*>(x + c));
    if (res != nullptr) {
      const float2 b = __bfloat1622float2(*reinterpret_cast<const bf162*>(res + c));
      const bf162 hv = __floats2bfloat162_rn(hf.x + b.x, hf.y + b.y);
      *reinterpret_cast<bf162*>(h_out + c) = hv;  // this thread reads it back below
      if (h_copy != nullptr) *reinterpret_cast<bf162*>(h_copy + c) = hv;
      hf = __bfloat1622float2(hv);
    }
    ss += hf.x * hf.x + hf.y * hf.y;
  }
  ss = WarpSum(ss);
  if (lane == 0) warp_sums[warp] = ss;
  __syncthreads();
  float total = 0.f;
  for (int i = 0; i < warps; ++i) total += warp_sums[i];
  const float rstd = rsqrtf(total / cols + eps);
  for (int c = 2 * threadIdx.x; c < cols; c += 2 * blockDim.x) {
    const float2 a = __bfloat1622float2(*reinterpret_cast<const bf162*>(h + c));
    const float2 wv = __bfloat1622float2(*reinterpret_cast<const bf162*>(w + c));
    *reinterpret_cast<bf162*>(y + c) = __floats2bfloat162_rn(wv.x * Rb(a.x * rstd), wv.y * Rb(a.y * rstd));
  }
  __syncthreads();  // warp_sums is read before a next row writes it
}

}  // namespace tandem::kernels::detail
