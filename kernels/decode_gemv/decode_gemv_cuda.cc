// The decode GEMV on CUDA: argument checks, then the launch (decode_gemv.cu).
#include "kernels/decode_gemv/decode_gemv_cuda.h"

#include <cstdint>
#include <string>

#include "kernels/common/cuda_status.h"
#include "kernels/decode_gemv/decode_gemv_launch.h"

namespace tandem::kernels {
namespace {

constexpr const char* kFn = "decode gemv (cuda)";

Status CheckPointer(const void* p, uintptr_t align, bool required, const char* name) {
  if (p == nullptr) {
    if (required) return InvalidArgument(std::string(kFn) + ": " + name + " is null");
    return Status::Ok();
  }
  if (reinterpret_cast<uintptr_t>(p) % align != 0)
    return InvalidArgument(std::string(kFn) + ": " + name + " is not " + std::to_string(align) + "-byte aligned");
  return Status::Ok();
}

}  // namespace

Status DecodeGemvCuda(const DecodeGemvShape& s, const __nv_bfloat16* x, const __nv_bfloat16* residual,
                      const __nv_bfloat16* norm_weight, const __nv_bfloat16* weight, __nv_bfloat16* sum_out,
                      __nv_bfloat16* y, cudaStream_t stream) {
  TANDEM_RETURN_IF_ERROR(CheckDecodeGemvShape(s), kFn);
  if ((residual == nullptr) != (sum_out == nullptr))
    return InvalidArgument(std::string(kFn) + ": residual and sum_out must be given together");
  if (!s.norm && residual != nullptr) return InvalidArgument(std::string(kFn) + ": a residual needs the norm");
  if (s.norm != (norm_weight != nullptr))
    return InvalidArgument(std::string(kFn) + ": norm_weight must be given exactly when the input is normalised");
  TANDEM_RETURN_IF_ERROR(CheckPointer(x, 16, true, "x"));
  TANDEM_RETURN_IF_ERROR(CheckPointer(weight, 16, true, "weight"));
  TANDEM_RETURN_IF_ERROR(CheckPointer(y, 2, true, "y"));
  TANDEM_RETURN_IF_ERROR(CheckPointer(residual, 16, false, "residual"));
  TANDEM_RETURN_IF_ERROR(CheckPointer(sum_out, 4, false, "sum_out"));
  TANDEM_RETURN_IF_ERROR(CheckPointer(norm_weight, 4, false, "norm_weight"));
  return CudaStatus(detail::LaunchDecodeGemv(s.rows, s.in, s.out, s.norm, s.swiglu, s.eps, s.dependent, x, residual,
                                             norm_weight, weight, sum_out, y, stream),
                    "decode gemv launch");
}

}  // namespace tandem::kernels
