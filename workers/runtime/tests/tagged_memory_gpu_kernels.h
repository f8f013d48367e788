// Small CUDA kernels for tagged_memory_gpu_test.cc: work that reads and
// writes tagged memory from the GPU itself (and from inside a captured CUDA
// graph), so the test sees what a worker's kernels see after release/resume.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace tandem::memory::gputest {

// out[i] = in[i] * a + b over n 32-bit words (in == out allowed).
cudaError_t LaunchAffine(const uint32_t* in, uint32_t* out, size_t n, uint32_t a, uint32_t b, cudaStream_t stream);
// Each block first spins for about `spin_cycles` SM clock cycles, then writes
// out[i] = value: a slow writer still queued when the host moves on.
cudaError_t LaunchSlowFill(uint32_t* out, size_t n, uint32_t value, long long spin_cycles, cudaStream_t stream);

}  // namespace tandem::memory::gputest
