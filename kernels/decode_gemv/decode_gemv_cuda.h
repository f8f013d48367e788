// The decode GEMV on CUDA (decode_gemv.h's math with bf16 rounding): bf16
// tensors, fp32 accumulation. x, residual and weight 16-byte aligned;
// sum_out 4-byte aligned; residual and sum_out null together, and only with
// a norm; norm_weight given exactly with a norm. Launches on `stream`;
// InvalidArgument for a bad shape or pointer, Internal for a failed launch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "common/status.h"
#include "kernels/decode_gemv/decode_gemv.h"

namespace tandem::kernels {

Status DecodeGemvCuda(const DecodeGemvShape& s, const __nv_bfloat16* x, const __nv_bfloat16* residual,
                      const __nv_bfloat16* norm_weight, const __nv_bfloat16* weight, __nv_bfloat16* sum_out,
                      __nv_bfloat16* y, cudaStream_t stream);

}  // namespace tandem::kernels
