// Internal: the decode GEMV kernel's launcher (decode_gemv.cu), plain types
// and cudaError_t; argument checks in decode_gemv_cuda.cc.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::kernels::detail {

cudaError_t LaunchDecodeGemv(int rows, int in, int64_t out, bool norm, bool swiglu, float eps, bool dependent,
                             const __nv_bfloat16* x, const __nv_bfloat16* residual, const __nv_bfloat16* norm_weight,
                             const __nv_bfloat16* weight, __nv_bfloat16* sum_out, __nv_bfloat16* y,
                             cudaStream_t stream);

}  // namespace tandem::kernels::detail
