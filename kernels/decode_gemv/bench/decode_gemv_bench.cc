// The decode GEMV against what it replaces (issue #14, "Performance"): for
// the projections of a decode step at batch 1-8, the time of the one kernel
// (norm and SwiGLU fused where the step has them) against cuBLAS's GEMM of
// the same shape plus, where fused, fused.h's RMSNorm and SwiGLU kernels
// (the unfused step's launches), and against the memory-bandwidth limit
// (W's bytes over the device copy bandwidth measured in the same run:
// cudaMemcpyAsync of 1 GiB, 2 bytes moved per byte copied). The weights are
// cycled over enough copies (>= 256 MiB) that every launch reads them from
// memory, not L2. Launches back to back on one stream, as in a graph (the
// kernel's dependent launches overlap, as in a decode step; cuBLAS's do
// not). Shapes whose input does not fit the kernel's staging have no row.
// Usage: decode_gemv_bench    (prints a Markdown table)
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <vector>

#include "kernels/decode_gemv/decode_gemv_cuda.h"
#include "kernels/fused/fused_cuda.h"
#include "kernels/testing/cuda_bench.h"

namespace {

using bf16 = __nv_bfloat16;
using tandem::kernels::DecodeGemvShape;
using tandem::kernels::testing::CopyBandwidth;

struct Projection {
  const char* name;
  int32_t in;
  int64_t out;
  bool norm, swiglu;
};

// Mean seconds per call of `launch(i)` over `iters` calls after 3 warm-ups.
int TimeIt(const std::function<bool(int)>& launch, int iters, double* seconds) {
  for (int i = 0; i < 3; ++i)
    if (!launch(i)) return 1;
  TANDEM_BENCH_CUDA(cudaDeviceSynchronize());
  cudaEvent_t e0, e1;
  TANDEM_BENCH_CUDA(cudaEventCreate(&e0));
  TANDEM_BENCH_CUDA(cudaEventCreate(&e1));
  TANDEM_BENCH_CUDA(cudaEventRecord(e0));
  for (int i = 0; i < iters; ++i)
    if (!launch(i)) return 1;
  TANDEM_BENCH_CUDA(cudaEventRecord(e1));
  TANDEM_BENCH_CUDA(cudaEventSynchronize(e1));
  float ms = 0;
  TANDEM_BENCH_CUDA(cudaEventElapsedTime(&ms, e0, e1));
  *seconds = ms * 1e-3 / iters;
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return 0;
}

int RunCase(const Projection& p, int32_t rows, double copy_bw, cublasHandle_t blas) {
  DecodeGemvShape s;
  s.rows = rows;
  s.in = p.in;
  s.out = p.out;
  s.norm = p.norm;
  s.swiglu = p.swiglu;
  if (!tandem::kernels::CheckDecodeGemvShape(s).ok()) return 0;  // an input too large to stage: not a row
  const size_t w_bytes = static_cast<size_t>(p.out) * p.in * sizeof(bf16);
  const int copies = static_cast<int>(std::clamp<size_t>((size_t{256} << 20) / w_bytes + 1, 1, 64));
  std::vector<bf16*> w(static_cast<size_t>(copies));
  for (bf16*& c : w) {
    TANDEM_BENCH_CUDA(cudaMalloc(&c, w_bytes));
    TANDEM_BENCH_CUDA(cudaMemset(c, 0x3c, w_bytes));  // bf16 0x3c3c ~ 0.0115
  }
  const size_t nx = static_cast<size_t>(rows) * p.in, nz = static_cast<size_t>(rows) * p.out;
  bf16 *x = nullptr, *res = nullptr, *nw = nullptr, *sum = nullptr, *normed = nullptr, *z = nullptr, *y = nullptr;
  for (bf16** b : {&x, &res, &sum, &normed}) TANDEM_BENCH_CUDA(cudaMalloc(b, nx * sizeof(bf16)));
  TANDEM_BENCH_CUDA(cudaMalloc(&nw, p.in * sizeof(bf16)));
  TANDEM_BENCH_CUDA(cudaMalloc(&z, nz * sizeof(bf16)));
  TANDEM_BENCH_CUDA(cudaMalloc(&y, nz * sizeof(bf16)));
  for (bf16* b : {x, res, normed}) TANDEM_BENCH_CUDA(cudaMemset(b, 0x3c, nx * sizeof(bf16)));
  TANDEM_BENCH_CUDA(cudaMemset(nw, 0x3f, p.in * sizeof(bf16)));
  const int iters = std::max(50, 2 * copies);

  double fused = 0, unfused = 0;
  auto kernel = [&](int i) {
    const bf16* weight = w[static_cast<size_t>(i % copies)];
    const tandem::Status st = tandem::kernels::DecodeGemvCuda(
        s, x, p.norm ? res : nullptr, p.norm ? nw : nullptr, weight, p.norm ? sum : nullptr, y, nullptr);
    if (!st.ok()) std::fprintf(stderr, "%s: %s\n", p.name, st.ToString().c_str());
    return st.ok();
  };
  // The unfused step: RMSNorm (with the residual), cuBLAS, SwiGLU.
  const float alpha = 1.f, beta = 0.f;
  auto baseline = [&](int i) {
    if (p.norm && !tandem::kernels::RmsNormForwardCuda({rows, p.in, 1e-6f}, x, res, nw, sum, normed, nullptr).ok())
      return false;
    if (cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(p.out), rows, p.in, &alpha,
                     w[static_cast<size_t>(i % copies)], CUDA_R_16BF, p.in, p.norm ? normed : x, CUDA_R_16BF, p.in,
                     &beta, z, CUDA_R_16BF, static_cast<int>(p.out), CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
      return false;
    return !p.swiglu || tandem::kernels::SwigluPackedForwardCuda(rows, p.out / 2, z, y, nullptr).ok();
  };
  if (TimeIt(kernel, iters, &fused) != 0 || TimeIt(baseline, iters, &unfused) != 0) return 1;
  TANDEM_BENCH_CUDA(cudaGetLastError());
  const double limit = static_cast<double>(w_bytes) / copy_bw;
  std::printf("| %s | %d | %.1f | %.1f | %.1f | **%.2f** | %.0f%% | %.0f%% |\n", p.name, rows, w_bytes / 1e6,
              unfused * 1e6, fused * 1e6, unfused / fused, 100.0 * limit / unfused, 100.0 * limit / fused);
  std::fflush(stdout);
  for (bf16* c : w) cudaFree(c);
  for (bf16* b : {x, res, nw, sum, normed, z, y}) cudaFree(b);
  return 0;
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  TANDEM_BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  double copy_bw = 0;
  if (CopyBandwidth(&copy_bw) != 0) return 1;
  cublasHandle_t blas = nullptr;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) return 1;
  std::printf("device: %s, %d SMs; device copy bandwidth %.0f GB/s (read + write, 1 GiB cudaMemcpyAsync)\n\n",
              prop.name, prop.multiProcessorCount, copy_bw / 1e9);
  std::printf("| projection (in -> out) | rows | MB of W | norm + cuBLAS + SwiGLU µs | decode gemv µs | ratio | "
              "unfused of limit | gemv of limit |\n|---|---|---|---|---|---|---|---|\n");
  // The engine bench's models (scripts/gpu/engine_bench.py): 0.35B (hidden
  // 1024, 16/8 heads of 64, FFN 2816, vocabulary 32768) and 3.1B
  // (Qwen2.5-3B's shapes: hidden 2048, 16/2 heads of 128, FFN 11008;
  // Qwen3's vocabulary, 151936).
  const Projection projections[] = {
      {"0.35B qkv 1024 -> 2048 (norm)", 1024, 2048, true, false},
      {"0.35B o 1024 -> 1024", 1024, 1024, false, false},
      {"0.35B gate/up 1024 -> 2x2816 (norm, SwiGLU)", 1024, 5632, true, true},
      {"0.35B down 2816 -> 1024", 2816, 1024, false, false},
      {"0.35B LM head 1024 -> 32768 (norm)", 1024, 32768, true, false},
      {"3B qkv 2048 -> 2560 (norm)", 2048, 2560, true, false},
      {"3B o 2048 -> 2048", 2048, 2048, false, false},
      {"3B gate/up 2048 -> 2x11008 (norm, SwiGLU)", 2048, 22016, true, true},
      {"3B down 11008 -> 2048", 11008, 2048, false, false},
      {"3B LM head 2048 -> 151936 (norm)", 2048, 151936, true, false},
  };
  for (const Projection& p : projections)
    for (int32_t rows : {1, 2, 4, 8})
      if (RunCase(p, rows, copy_bw, blas) != 0) return 1;
  cublasDestroy(blas);
  return 0;
}
