// The fused AdamW update on CUDA (adamw.h's math, the CPU implementation's
// bits): one kernel over a tensor's elements, on `stream`. The parameters
// and their gradients are fp32, bf16 or fp16 (`type`); fp32 parameters are
// the weights updated in place (`master` null); bf16 and fp16 parameters
// take the update through an fp32 `master` copy and are written as its
// rounding (to nearest even). exp_avg `m` and exp_avg_sq `v` are fp32.
// Every pointer is device memory, naturally aligned; 16-byte aligned
// pointers (and 8-byte for 16-bit parameters) take the vectorised path.
// InvalidArgument for a bad step, n or pointer, Internal for a failed launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/status.h"
#include "kernels/adamw/adamw.h"

namespace tandem::kernels {

enum class AdamWParamType { kF32, kBf16, kF16 };

Status AdamWCuda(const AdamWStep& s, AdamWParamType type, int64_t n, void* param, const void* grad, float* master,
                 float* m, float* v, cudaStream_t stream);

// The gradient clip's input on CUDA: *out += the sum of x_i^2 (x fp32,
// bf16 or fp16, each square exact in double), through a fixed grid of
// kSumSquaresCudaBlocks partial sums in `workspace` (device doubles) added
// in order by one thread: the same result on every run. `out` is a device
// double; nothing is read back to the host.
inline constexpr int kSumSquaresCudaBlocks = 1024;
Status SumSquaresCuda(AdamWParamType type, int64_t n, const void* x, double* workspace, double* out,
                      cudaStream_t stream);

}  // namespace tandem::kernels
