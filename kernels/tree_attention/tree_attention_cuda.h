// Tree attention on CUDA (sm_90a): bf16 q/k/v/out, fp32 accumulation and lse
// (issue #4; layouts and the mask model as in tree_attention.h / forest.h).
// Raw device pointers, shapes and a stream; no LibTorch. Every launcher checks
// its arguments and the launch, and returns a Status.
//
// Variants kept side by side: kSimple, the first correct version (fp32 CUDA
// cores, the baseline in the benchmark); kTensorCore (mma.sync bf16 tiles,
// FlashAttention-2 style online softmax); kTensorCoreOverlapV (forward with
// one V stage, 0-10% faster on the H200); kTensorCoreWide (forward, 128-row
// blocks, two m16 tiles per warp, 1.04-1.3x over kTensorCoreOverlapV);
// kTensorCoreWideLazy (the same with lazy rescaling, another 1.03-1.05x, the
// default forward); kTensorCoreFusedBwd (backward in one pass, dQ by fp32
// atomics; forward = kTensorCoreWideLazy) and kTensorCoreFusedBwdOrdered (the
// same, deterministic: dQ summed in a fixed order); kTensorCoreFusedBwdWide
// (one pass, 128 keys per block). Figures: docs/benchmarks.md.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/status.h"
#include "kernels/tree_attention/forest.h"
#include "kernels/tree_attention/tree_attention.h"

namespace tandem::kernels {

// Device copies of a TreeAttentionPlan's arrays (see forest.h).
struct TreeAttentionDevicePlan {
  const int32_t* kend = nullptr;
  const int32_t* q_ptr = nullptr;
  const int32_t* kv_ranges = nullptr;
  const int32_t* k_ptr = nullptr;
  const int32_t* q_ranges = nullptr;
  const int32_t* tile_kend_min = nullptr;
  int32_t num_tokens = 0;
  int32_t num_tiles = 0;
};

// Owns one device allocation holding a plan; movable, frees on destruction.
class TreeAttentionPlanBuffer {
 public:
  TreeAttentionPlanBuffer() = default;
  TreeAttentionPlanBuffer(TreeAttentionPlanBuffer&& o) noexcept;
  TreeAttentionPlanBuffer& operator=(TreeAttentionPlanBuffer&& o) noexcept;
  TreeAttentionPlanBuffer(const TreeAttentionPlanBuffer&) = delete;
  TreeAttentionPlanBuffer& operator=(const TreeAttentionPlanBuffer&) = delete;
  ~TreeAttentionPlanBuffer();

  // Copies the plan to the device (synchronously on `stream`).
  static StatusOr<TreeAttentionPlanBuffer> Upload(const TreeAttentionPlan& plan, cudaStream_t stream);
  const TreeAttentionDevicePlan& view() const { return view_; }

 private:
  void* mem_ = nullptr;
  TreeAttentionDevicePlan view_;
};

// kTensorCoreOverlapV changes the forward only (one V stage, V load
// overlapped with the next tile's scores); its backward is kTensorCore's.
// kTensorCoreWide changes the forward only: 128 query rows per block, 32 per
// warp, over the union of two plan tiles' key lists; its backward is
// kTensorCore's. kTensorCoreWideLazy: the same, rescaling the accumulators
// only when a row's max grows by more than 2^8 (tree_attention_fwd_wide.cu).
// kTensorCoreFusedBwd changes the backward only (its forward is
// kTensorCoreWideLazy's): one block per key tile computes dK, dV and adds
// its share of dQ into an fp32 workspace with atomics, so dQ's last bits may
// differ between runs (tree_attention_bwd_fused.cu). kTensorCoreFusedBwdOrdered:
// the same, but the key tiles add into a query tile's dQ in a fixed order
// (taking turns), so every output is bitwise reproducible.
// kTensorCoreFusedBwdWide: kTensorCoreFusedBwd with 128 keys (two plan key
// tiles) per block of 8 warps: half the Q/dO loads and dQ atomics per key.
enum class TreeAttentionKernel {
  kSimple,
  kTensorCore,
  kTensorCoreOverlapV,
  kTensorCoreWide,
  kTensorCoreWideLazy,
  kTensorCoreFusedBwd,
  kTensorCoreFusedBwdOrdered,
  kTensorCoreFusedBwdWide,
};

// Size in floats of the `dq_accum` workspace of the fused backward variants:
// Hq * (T * D + ceil(T / 64)).
size_t TreeAttentionBackwardWorkspaceFloats(const TreeAttentionShape& shape);

// out [T, Hq, D] bf16, lse [Hq, T] fp32. head_dim must be 64 or 128.
Status TreeAttentionForwardCuda(const TreeAttentionDevicePlan& plan, const TreeAttentionShape& shape,
                                const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                __nv_bfloat16* out, float* lse, cudaStream_t stream,
                                TreeAttentionKernel kernel = TreeAttentionKernel::kTensorCoreWideLazy);

// Gradients of sum(out * dout). `delta` is a workspace of Hq*T floats.
// dq [T, Hq, D], dk and dv [T, Hkv, D] are overwritten (bf16).
// `dq_accum` (TreeAttentionBackwardWorkspaceFloats floats, 16-byte aligned,
// any contents) is a workspace used by the fused variants only; when null
// they allocate it on `stream` (cudaMallocAsync) for the call.
Status TreeAttentionBackwardCuda(const TreeAttentionDevicePlan& plan, const TreeAttentionShape& shape,
                                 const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                 const __nv_bfloat16* out, const __nv_bfloat16* dout, const float* lse, float* delta,
                                 __nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv, cudaStream_t stream,
                                 TreeAttentionKernel kernel = TreeAttentionKernel::kTensorCore,
                                 float* dq_accum = nullptr);

}  // namespace tandem::kernels
