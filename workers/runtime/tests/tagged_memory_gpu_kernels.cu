// Kernels of tagged_memory_gpu_kernels.h.
#include "workers/runtime/tests/tagged_memory_gpu_kernels.h"

namespace tandem::memory::gputest {
namespace {

__global__ void Affine(const uint32_t* in, uint32_t* out, size_t n, uint32_t a, uint32_t b) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    out[i] = in[i] * a + b;
}

__global__ void SlowFill(uint32_t* out, size_t n, uint32_t value, long long spin_cycles) {
  if (threadIdx.x == 0) {
    long long start = clock64();
    while (clock64() - start < spin_cycles) {
    }
  }
  __syncthreads();
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    out[i] = value;
}

}  // namespace

cudaError_t LaunchAffine(const uint32_t* in, uint32_t* out, size_t n, uint32_t a, uint32_t b, cudaStream_t stream) {
  Affine<<<1024, 256, 0, stream>>>(in, out, n, a, b);
  return cudaGetLastError();
}

cudaError_t LaunchSlowFill(uint32_t* out, size_t n, uint32_t value, long long spin_cycles, cudaStream_t stream) {
  SlowFill<<<256, 256, 0, stream>>>(out, n, value, spin_cycles);
  return cudaGetLastError();
}

}  // namespace tandem::memory::gputest
