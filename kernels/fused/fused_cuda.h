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

// Decode's q/k/v glue in one pass (forward only): qkv [T, row_stride] holds
// each token's Hq q heads, then Hkv k heads, then Hkv v heads, D elements
// each (the fused q/k/v projection's output; row_stride >= (Hq + 2 Hkv) D,
// even). The q heads get q/k norm + rotary (QkNormRotaryForwardCuda's math,
// bit for bit) with q_weight into q_out [T, Hq, D]; the k heads the same
// with k_weight, and the v heads as they are, go to slot slot_mapping[t] of
// the paged pools key_slots / value_slots [num_slots, Hkv, D]
// (PagedKvWriteCuda's layout; a negative slot or one >= num_slots is
// skipped).
struct QkvRotaryShape {
  int64_t tokens = 0;
  int32_t q_heads = 0, kv_heads = 0, head_dim = 0;  // head_dim a multiple of 4
  int64_t row_stride = 0;
  int64_t num_slots = 0;
  float eps = 1e-6f;
};
Status QkvRotaryKvWriteCuda(const QkvRotaryShape& s, const __nv_bfloat16* qkv, const __nv_bfloat16* q_weight,
                            const __nv_bfloat16* k_weight, const __nv_bfloat16* cos, const __nv_bfloat16* sin,
                            const int64_t* slot_mapping, __nv_bfloat16* q_out, __nv_bfloat16* key_slots,
                            __nv_bfloat16* value_slots, cudaStream_t stream);

// gate_up [rows, 2 * inter] (the fused gate/up projection: gate columns, then
// up; inter even) -> y [rows, inter] = SwigluForwardCuda(gate, up) bit for bit.
Status SwigluPackedForwardCuda(int64_t rows, int64_t inter, const __nv_bfloat16* gate_up, __nv_bfloat16* y,
                               cudaStream_t stream);

Status SwigluForwardCuda(int64_t n, const __nv_bfloat16* gate, const __nv_bfloat16* up, __nv_bfloat16* y,
                         cudaStream_t stream);
Status SwigluBackwardCuda(int64_t n, const __nv_bfloat16* gate, const __nv_bfloat16* up,
                          const __nv_bfloat16* grad_y, __nv_bfloat16* grad_gate, __nv_bfloat16* grad_up,
                          cudaStream_t stream);

}  // namespace tandem::kernels
