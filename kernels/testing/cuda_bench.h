// Helpers for the CUDA benchmarks of kernels/ (bench/): checked calls that
// make main() fail, and the device copy bandwidth every "of limit" column
// is measured against in the same run.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>

// Prints the failed call and returns 1 from the enclosing function.
#define TANDEM_BENCH_CUDA(expr)                                                                   \
  do {                                                                                            \
    cudaError_t _e = (expr);                                                                      \
    if (_e != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(_e)); \
      return 1;                                                                                   \
    }                                                                                             \
  } while (0)

namespace tandem::kernels::testing {

// Device copy bandwidth in bytes/s, read + write (cudaMemcpyAsync of 1 GiB,
// device to device, ten times): *bw. 0 on success, 1 on a CUDA error.
inline int CopyBandwidth(double* bw) {
  const size_t bytes = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  TANDEM_BENCH_CUDA(cudaMalloc(&a, bytes));
  TANDEM_BENCH_CUDA(cudaMalloc(&b, bytes));
  cudaEvent_t e0, e1;
  TANDEM_BENCH_CUDA(cudaEventCreate(&e0));
  TANDEM_BENCH_CUDA(cudaEventCreate(&e1));
  TANDEM_BENCH_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
  const int reps = 10;
  TANDEM_BENCH_CUDA(cudaEventRecord(e0));
  for (int i = 0; i < reps; ++i)
    TANDEM_BENCH_CUDA(cudaMemcpyAsync(i % 2 ? a : b, i % 2 ? b : a, bytes, cudaMemcpyDeviceToDevice));
  TANDEM_BENCH_CUDA(cudaEventRecord(e1));
  TANDEM_BENCH_CUDA(cudaEventSynchronize(e1));
  float ms = 0;
  TANDEM_BENCH_CUDA(cudaEventElapsedTime(&ms, e0, e1));
  *bw = 2.0 * static_cast<double>(bytes) * reps / (ms * 1e-3);
  cudaFree(a);
  cudaFree(b);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return 0;
}

}  // namespace tandem::kernels::testing
