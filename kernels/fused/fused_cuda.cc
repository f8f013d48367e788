// The fused decoder glue on CUDA: argument checks, workspace sizes, launches
// (fused_cuda.h; kernels in fused.cu).
#include "kernels/fused/fused_cuda.h"

#include <cstdint>
#include <initializer_list>
#include <string>

#include "kernels/common/cuda_status.h"
#include "kernels/fused/fused_launch.h"

namespace tandem::kernels {
namespace {

// Non-null (where required) and 4-byte aligned (bf16x2 accesses).
Status CheckPointers(const char* fn, std::initializer_list<const void*> required,
                     std::initializer_list<const void*> optional = {}) {
  for (const void* p : required)
    if (p == nullptr) return InvalidArgument(std::string(fn) + ": null pointer");
  for (std::initializer_list<const void*> list : {required, optional})
    for (const void* p : list)
      if (reinterpret_cast<uintptr_t>(p) % 4 != 0) return InvalidArgument(std::string(fn) + ": pointer not 4-byte aligned");
  return Status::Ok();
}

Status CheckWidth(const char* fn, int cols) {
  if (cols > kFusedCudaMaxCols)
    return InvalidArgument(std::string(fn) + ": rows of at most " + std::to_string(kFusedCudaMaxCols) +
                           " elements, got " + std::to_string(cols));
  return Status::Ok();
}

Status CheckWorkspace(const char* fn, const void* ws, size_t bytes, size_t need) {
  if (need > 0 && (ws == nullptr || bytes < need))
    return InvalidArgument(std::string(fn) + ": workspace of " + std::to_string(bytes) + " bytes, needs " +
                           std::to_string(need));
  return Status::Ok();
}

// No rows: grad_weight is zero.
Status ZeroGradWeight(const char* fn, float* grad_weight, int cols, cudaStream_t stream) {
  TANDEM_RETURN_IF_ERROR(CheckPointers(fn, {grad_weight}));
  return Cuda(cudaMemsetAsync(grad_weight, 0, sizeof(float) * static_cast<size_t>(cols), stream),
              "zeroing grad_weight");
}

}  // namespace

Status RmsNormForwardCuda(const RmsNormShape& s, const __nv_bfloat16* x, const __nv_bfloat16* residual,
                          const __nv_bfloat16* weight, __nv_bfloat16* sum_out, __nv_bfloat16* y,
                          cudaStream_t stream) {
  constexpr const char* kFn = "rms norm (cuda)";
  TANDEM_RETURN_IF_ERROR(CheckRmsNormShape(s), kFn);
  if ((residual == nullptr) != (sum_out == nullptr))
    return InvalidArgument("rms norm (cuda): residual and sum_out must be given together");
  if (s.rows == 0) return Status::Ok();  // empty tensors may have null data
  TANDEM_RETURN_IF_ERROR(CheckPointers(kFn, {x, weight, y}, {residual, sum_out}));
  return CudaStatus(detail::LaunchRmsNormForward(s.rows, s.cols, s.eps, x, residual, weight, sum_out, y, stream),
                    "rms norm forward launch");
}

size_t RmsNormBackwardWorkspaceBytes(const RmsNormShape& s) {
  if (s.cols <= 0) return 0;
  return sizeof(float) * static_cast<size_t>(detail::FusedNormBackwardBlocks(s.rows, s.cols)) *
         static_cast<size_t>(s.cols);
}

Status RmsNormBackwardCuda(const RmsNormShape& s, const __nv_bfloat16* h, const __nv_bfloat16* weight,
                           const __nv_bfloat16* grad_y, const __nv_bfloat16* grad_h, __nv_bfloat16* grad_in,
                           float* grad_weight, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  constexpr const char* kFn = "rms norm backward (cuda)";
  TANDEM_RETURN_IF_ERROR(CheckRmsNormShape(s), kFn);
  TANDEM_RETURN_IF_ERROR(CheckWidth(kFn, s.cols));
  if (s.rows == 0) return ZeroGradWeight(kFn, grad_weight, s.cols, stream);
  TANDEM_RETURN_IF_ERROR(CheckPointers(kFn, {h, weight, grad_y, grad_in, grad_weight}, {grad_h}));
  TANDEM_RETURN_IF_ERROR(CheckWorkspace(kFn, workspace, workspace_bytes, RmsNormBackwardWorkspaceBytes(s)));
  return CudaStatus(detail::LaunchRmsNormBackward(s.rows, s.cols, s.eps, h, weight, grad_y, grad_h, grad_in,
                                                  static_cast<float*>(workspace), grad_weight, stream),
                    "rms norm backward launch");
}

Status QkNormRotaryForwardCuda(const QkRotaryShape& s, const __nv_bfloat16* x, const __nv_bfloat16* weight,
                               const __nv_bfloat16* cos, const __nv_bfloat16* sin, __nv_bfloat16* y,
                               cudaStream_t stream) {
  constexpr const char* kFn = "qk norm rotary (cuda)";
  TANDEM_RETURN_IF_ERROR(CheckQkRotaryShape(s), kFn);
  if (s.tokens == 0) return Status::Ok();
  TANDEM_RETURN_IF_ERROR(CheckPointers(kFn, {x, weight, cos, sin, y}));
  return CudaStatus(
      detail::LaunchQkNormRotaryForward(s.tokens, s.heads, s.head_dim, s.eps, x, weight, cos, sin, y, stream),
      "qk norm rotary forward launch");
}

size_t QkNormRotaryBackwardWorkspaceBytes(const QkRotaryShape& s) {
  if (s.head_dim <= 0 || s.heads <= 0) return 0;
  return sizeof(float) * static_cast<size_t>(detail::FusedNormBackwardBlocks(s.tokens * s.heads, s.head_dim)) *
         static_cast<size_t>(s.head_dim);
}

Status QkNormRotaryBackwardCuda(const QkRotaryShape& s, const __nv_bfloat16* x, const __nv_bfloat16* weight,
                                const __nv_bfloat16* cos, const __nv_bfloat16* sin, const __nv_bfloat16* grad_y,
                                __nv_bfloat16* grad_x, float* grad_weight, void* workspace, size_t workspace_bytes,
                                cudaStream_t stream) {
  constexpr const char* kFn = "qk norm rotary backward (cuda)";
  TANDEM_RETURN_IF_ERROR(CheckQkRotaryShape(s), kFn);
  TANDEM_RETURN_IF_ERROR(CheckWidth(kFn, s.head_dim));
  if (s.tokens == 0) return ZeroGradWeight(kFn, grad_weight, s.head_dim, stream);
  TANDEM_RETURN_IF_ERROR(CheckPointers(kFn, {x, weight, cos, sin, grad_y, grad_x, grad_weight}));
  TANDEM_RETURN_IF_ERROR(CheckWorkspace(kFn, workspace, workspace_bytes, QkNormRotaryBackwardWorkspaceBytes(s)));
  return CudaStatus(detail::LaunchQkNormRotaryBackward(s.tokens, s.heads, s.head_dim, s.eps, x, weight, cos, sin,
                                                       grad_y, grad_x, static_cast<float*>(workspace), grad_weight,
                                                       stream),
                    "qk norm rotary backward launch");
}

Status QkvRotaryKvWriteCuda(const QkvRotaryShape& s, const __nv_bfloat16* qkv, const __nv_bfloat16* q_weight,
                            const __nv_bfloat16* k_weight, const __nv_bfloat16* cos, const __nv_bfloat16* sin,
                            const int64_t* slot_mapping, __nv_bfloat16* q_out, __nv_bfloat16* key_slots,
                            __nv_bfloat16* value_slots, cudaStream_t stream) {
  constexpr const char* kFn = "qkv rotary kv write (cuda)";
  QkRotaryShape heads;
  heads.tokens = s.tokens;
  heads.heads = s.q_heads;
  heads.head_dim = s.head_dim;
  heads.eps = s.eps;
  TANDEM_RETURN_IF_ERROR(CheckQkRotaryShape(heads), kFn);
  if (s.kv_heads <= 0 || s.num_slots < 0 || s.row_stride % 2 != 0 ||
      s.row_stride < static_cast<int64_t>(s.q_heads + 2 * s.kv_heads) * s.head_dim)
    return InvalidArgument(std::string(kFn) + ": kv_heads > 0, num_slots >= 0 and an even row_stride of at least (" +
                           "q_heads + 2 kv_heads) * head_dim expected, got kv_heads " + std::to_string(s.kv_heads) +
                           ", row_stride " + std::to_string(s.row_stride));
  if (s.tokens == 0) return Status::Ok();
  TANDEM_RETURN_IF_ERROR(CheckPointers(kFn, {qkv, q_weight, k_weight, cos, sin, q_out, key_slots, value_slots}));
  if (slot_mapping == nullptr) return InvalidArgument(std::string(kFn) + ": null slot_mapping");
  return CudaStatus(detail::LaunchQkvRotaryKvWrite(s.tokens, s.q_heads, s.kv_heads, s.head_dim, s.row_stride,
                                                   s.num_slots, s.eps, qkv, q_weight, k_weight, cos, sin,
                                                   slot_mapping, q_out, key_slots, value_slots, stream),
                    "qkv rotary kv write launch");
}

Status SwigluPackedForwardCuda(int64_t rows, int64_t inter, const __nv_bfloat16* gate_up, __nv_bfloat16* y,
                               cudaStream_t stream) {
  constexpr const char* kFn = "swiglu packed (cuda)";
  if (rows < 0 || inter <= 0 || inter % 2 != 0)
    return InvalidArgument(std::string(kFn) + ": rows >= 0 and an even inter > 0 expected, got " +
                           std::to_string(rows) + " and " + std::to_string(inter));
  if (rows == 0) return Status::Ok();
  TANDEM_RETURN_IF_ERROR(CheckPointers(kFn, {gate_up, y}));
  return CudaStatus(detail::LaunchSwigluPackedForward(rows, inter, gate_up, y, stream), "swiglu packed launch");
}

Status SwigluForwardCuda(int64_t n, const __nv_bfloat16* gate, const __nv_bfloat16* up, __nv_bfloat16* y,
                         cudaStream_t stream) {
  constexpr const char* kFn = "swiglu (cuda)";
  if (n < 0) return InvalidArgument("swiglu (cuda): n must be >= 0");
  if (n == 0) return Status::Ok();
  TANDEM_RETURN_IF_ERROR(CheckPointers(kFn, {gate, up, y}));
  return CudaStatus(detail::LaunchSwigluForward(n, gate, up, y, stream), "swiglu forward launch");
}

Status SwigluBackwardCuda(int64_t n, const __nv_bfloat16* gate, const __nv_bfloat16* up,
                          const __nv_bfloat16* grad_y, __nv_bfloat16* grad_gate, __nv_bfloat16* grad_up,
                          cudaStream_t stream) {
  constexpr const char* kFn = "swiglu backward (cuda)";
  if (n < 0) return InvalidArgument("swiglu backward (cuda): n must be >= 0");
  if (n == 0) return Status::Ok();
  TANDEM_RETURN_IF_ERROR(CheckPointers(kFn, {gate, up, grad_y, grad_gate, grad_up}));
  return CudaStatus(detail::LaunchSwigluBackward(n, gate, up, grad_y, grad_gate, grad_up, stream),
                    "swiglu backward launch");
}

}  // namespace tandem::kernels
