// Internal: the raw kernel launchers behind tree_attention_cuda.h, compiled by
// nvcc. Plain types only; argument checks live in tree_attention_cuda.cc.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::kernels::detail {

struct TreeAttnArgs {
  // plan
  const int32_t* kend;
  const int32_t* q_ptr;
  const int32_t* kv_ranges;
  const int32_t* k_ptr;
  const int32_t* q_ranges;
  const int32_t* tile_kend_min;
  int32_t num_tiles;
  // shape
  int32_t T, Hq, Hkv, D;
  float scale;
  // tensors
  const __nv_bfloat16 *q, *k, *v, *out, *dout;
  const float* lse_in;
  float* lse;
  float* delta;
  __nv_bfloat16 *o, *dq, *dk, *dv;
};

cudaError_t LaunchForwardSimple(const TreeAttnArgs& a, cudaStream_t s);
cudaError_t LaunchBackwardSimple(const TreeAttnArgs& a, cudaStream_t s);
cudaError_t LaunchForwardTensorCore(const TreeAttnArgs& a, cudaStream_t s);
cudaError_t LaunchForwardTensorCoreOverlapV(const TreeAttnArgs& a, cudaStream_t s);
cudaError_t LaunchForwardTensorCoreWide(const TreeAttnArgs& a, cudaStream_t s);
cudaError_t LaunchForwardTensorCoreWideLazy(const TreeAttnArgs& a, cudaStream_t s);
cudaError_t LaunchBackwardTensorCore(const TreeAttnArgs& a, cudaStream_t s);
// One pass (tree_attention_bwd_fused.cu); ws: T*Hq*D floats of dQ partial
// sums, then Hq*num_tiles ints of turn counters (ordered only).
cudaError_t LaunchBackwardTensorCoreFused(const TreeAttnArgs& a, float* ws, bool ordered, cudaStream_t s);
// The same with 128 keys per block; ws: T*Hq*D floats.
cudaError_t LaunchBackwardTensorCoreFusedWide(const TreeAttnArgs& a, float* ws, cudaStream_t s);

}  // namespace tandem::kernels::detail
