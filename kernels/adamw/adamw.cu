// The fused AdamW update and the clip's sum of squares on CUDA
// (adamw_cuda.h): argument checks and grid-stride kernels, four elements a
// thread per iteration with vector loads when every pointer is aligned for
// them. Each operation is an explicit
// round-to-nearest intrinsic: --use_fast_math (the kernels' flags) would
// otherwise approximate the square root and the divisions, and nvcc would
// contract multiply-adds; this way the bits are the CPU implementation's.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/adamw/adamw_cuda.h"
#include "kernels/common/cuda_status.h"

namespace tandem::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kVec = 4;
constexpr int64_t kMaxBlocks = 8192;

template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T x[V];
};

template <typename P>
__device__ __forceinline__ float ToFloat(P x) {
  if constexpr (std::is_same_v<P, float>) {
    return x;
  } else if constexpr (std::is_same_v<P, __nv_bfloat16>) {
    return __bfloat162float(x);
  } else {
    return __half2float(x);
  }
}
template <typename P>
__device__ __forceinline__ P FromFloat(float x) {
  if constexpr (std::is_same_v<P, float>) {
    return x;
  } else if constexpr (std::is_same_v<P, __nv_bfloat16>) {
    return __float2bfloat16_rn(x);
  } else {
    return __float2half_rn(x);
  }
}

// adamw.h's formula, in adamw_cpu.cc's order and roundings.
__device__ __forceinline__ void Update(const AdamWScalars& k, float grad, float& w, float& m, float& v) {
  const float g = __fmul_rn(grad, k.grad_scale);
  m = __fadd_rn(__fmul_rn(m, k.beta1), __fmul_rn(k.one_minus_beta1, g));
  v = __fadd_rn(__fmul_rn(v, k.beta2), __fmul_rn(__fmul_rn(k.one_minus_beta2, g), g));
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), k.bias_correction2_sqrt), k.eps);
  w = __fadd_rn(__fmul_rn(w, k.decay), __fdiv_rn(__fmul_rn(k.neg_step_size, m), denom));
}

// V elements from i on (V > 1: i + V <= n and the pointers aligned for it).
template <typename P, int V>
__device__ __forceinline__ void UpdateAt(const AdamWScalars& k, int64_t i, P* __restrict__ param,
                                         const P* __restrict__ grad, float* __restrict__ master,
                                         float* __restrict__ m, float* __restrict__ v) {
  constexpr bool kInPlace = std::is_same_v<P, float>;
  float* w_ptr = kInPlace ? reinterpret_cast<float*>(param) : master;
  const Pack<P, V> g = *reinterpret_cast<const Pack<P, V>*>(grad + i);
  Pack<float, V> w = *reinterpret_cast<const Pack<float, V>*>(w_ptr + i);
  Pack<float, V> mm = *reinterpret_cast<const Pack<float, V>*>(m + i);
  Pack<float, V> vv = *reinterpret_cast<const Pack<float, V>*>(v + i);
#pragma unroll
  for (int j = 0; j < V; ++j) Update(k, ToFloat(g.x[j]), w.x[j], mm.x[j], vv.x[j]);
  *reinterpret_cast<Pack<float, V>*>(w_ptr + i) = w;
  *reinterpret_cast<Pack<float, V>*>(m + i) = mm;
  *reinterpret_cast<Pack<float, V>*>(v + i) = vv;
  if constexpr (!kInPlace) {
    Pack<P, V> p;
#pragma unroll
    for (int j = 0; j < V; ++j) p.x[j] = FromFloat<P>(w.x[j]);
    *reinterpret_cast<Pack<P, V>*>(param + i) = p;
  }
}

template <typename P, int V>
__global__ void __launch_bounds__(kThreads) AdamWKernel(AdamWScalars k, int64_t n, P* __restrict__ param,
                                                        const P* __restrict__ grad, float* __restrict__ master,
                                                        float* __restrict__ m, float* __restrict__ v) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads * V;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * V; i < n; i += stride) {
    if (V == 1 || i + V <= n) {
      UpdateAt<P, V>(k, i, param, grad, master, m, v);
    } else {
      for (int64_t j = i; j < n; ++j) UpdateAt<P, 1>(k, j, param, grad, master, m, v);
    }
  }
}

// acc + x², squared exactly in double, each operation rounded on its own.
template <typename P>
__device__ __forceinline__ double AddSquare(double acc, P x) {
  const double f = ToFloat(x);
  return __dadd_rn(acc, __dmul_rn(f, f));
}

template <typename P, int V>
__global__ void __launch_bounds__(kThreads) SumSquaresKernel(int64_t n, const P* __restrict__ x,
                                                             double* __restrict__ partial) {
  double acc = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads * V;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * V; i < n; i += stride) {
    if (V == 1 || i + V <= n) {
      const Pack<P, V> p = *reinterpret_cast<const Pack<P, V>*>(x + i);
#pragma unroll
      for (int j = 0; j < V; ++j) acc = AddSquare(acc, p.x[j]);
    } else {
      for (int64_t j = i; j < n; ++j) acc = AddSquare(acc, x[j]);
    }
  }
  for (int offset = 16; offset > 0; offset /= 2) acc = __dadd_rn(acc, __shfl_down_sync(0xffffffffu, acc, offset));
  __shared__ double warp_sums[kThreads / 32];
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    double sum = 0;
    for (int w = 0; w < kThreads / 32; ++w) sum = __dadd_rn(sum, warp_sums[w]);
    partial[blockIdx.x] = sum;
  }
}

__global__ void AddPartialsKernel(int blocks, const double* __restrict__ partial, double* __restrict__ out) {
  double sum = *out;
  for (int b = 0; b < blocks; ++b) sum = __dadd_rn(sum, partial[b]);
  *out = sum;
}

bool Aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

template <typename P>
Status Launch(const AdamWScalars& k, int64_t n, void* param_v, const void* grad_v, float* master, float* m, float* v,
              cudaStream_t stream) {
  P* param = static_cast<P*>(param_v);
  const P* grad = static_cast<const P*>(grad_v);
  for (const void* p : {static_cast<const void*>(param), static_cast<const void*>(grad)})
    if (!Aligned(p, sizeof(P))) return InvalidArgument("adamw (cuda): a parameter or gradient pointer is misaligned");
  for (const float* p : {static_cast<const float*>(master), static_cast<const float*>(m), static_cast<const float*>(v)})
    if (!Aligned(p, sizeof(float))) return InvalidArgument("adamw (cuda): a state pointer is misaligned");
  const bool vec = Aligned(param, sizeof(P) * kVec) && Aligned(grad, sizeof(P) * kVec) && Aligned(m, 16) &&
                   Aligned(v, 16) && (master == nullptr || Aligned(master, 16));
  const int per_thread = vec ? kVec : 1;
  const int64_t blocks = std::min(kMaxBlocks, (n + int64_t{kThreads} * per_thread - 1) / (int64_t{kThreads} * per_thread));
  if (vec) {
    AdamWKernel<P, kVec><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(k, n, param, grad, master, m, v);
  } else {
    AdamWKernel<P, 1><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(k, n, param, grad, master, m, v);
  }
  return CudaStatus(cudaGetLastError(), "adamw launch");
}

template <typename P>
Status LaunchSumSquares(int64_t n, const void* x_v, double* workspace, double* out, cudaStream_t stream) {
  const P* x = static_cast<const P*>(x_v);
  if (!Aligned(x, sizeof(P))) return InvalidArgument("sum of squares (cuda): misaligned pointer");
  if (Aligned(x, sizeof(P) * kVec)) {
    SumSquaresKernel<P, kVec><<<kSumSquaresCudaBlocks, kThreads, 0, stream>>>(n, x, workspace);
  } else {
    SumSquaresKernel<P, 1><<<kSumSquaresCudaBlocks, kThreads, 0, stream>>>(n, x, workspace);
  }
  AddPartialsKernel<<<1, 1, 0, stream>>>(kSumSquaresCudaBlocks, workspace, out);
  return CudaStatus(cudaGetLastError(), "sum of squares launch");
}

}  // namespace

Status SumSquaresCuda(AdamWParamType type, int64_t n, const void* x, double* workspace, double* out,
                      cudaStream_t stream) {
  if (n < 0) return InvalidArgument("sum of squares (cuda): negative element count " + std::to_string(n));
  if (out == nullptr || workspace == nullptr || (n > 0 && x == nullptr))
    return InvalidArgument("sum of squares (cuda): null pointer");
  if (n == 0) return Status::Ok();
  switch (type) {
    case AdamWParamType::kF32: return LaunchSumSquares<float>(n, x, workspace, out, stream);
    case AdamWParamType::kBf16: return LaunchSumSquares<__nv_bfloat16>(n, x, workspace, out, stream);
    case AdamWParamType::kF16: return LaunchSumSquares<__half>(n, x, workspace, out, stream);
  }
  return InvalidArgument("sum of squares (cuda): unknown type");
}

Status AdamWCuda(const AdamWStep& s, AdamWParamType type, int64_t n, void* param, const void* grad, float* master,
                 float* m, float* v, cudaStream_t stream) {
  TANDEM_RETURN_IF_ERROR(CheckAdamWStep(s));
  if (n < 0) return InvalidArgument("adamw (cuda): negative element count " + std::to_string(n));
  if (n == 0) return Status::Ok();
  if (param == nullptr || grad == nullptr || m == nullptr || v == nullptr)
    return InvalidArgument("adamw (cuda): null pointer");
  if ((type == AdamWParamType::kF32) != (master == nullptr))
    return InvalidArgument("adamw (cuda): an fp32 master is given exactly for bf16 and fp16 parameters");
  const AdamWScalars k = MakeAdamWScalars(s);
  switch (type) {
    case AdamWParamType::kF32: return Launch<float>(k, n, param, grad, master, m, v, stream);
    case AdamWParamType::kBf16: return Launch<__nv_bfloat16>(k, n, param, grad, master, m, v, stream);
    case AdamWParamType::kF16: return Launch<__half>(k, n, param, grad, master, m, v, stream);
  }
  return InvalidArgument("adamw (cuda): unknown parameter type");
}

}  // namespace tandem::kernels
