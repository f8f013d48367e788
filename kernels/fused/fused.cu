// CUDA kernels of the fused decoder glue (fused.h, bf16 rounding): one warp
// per row for RMSNorm and per (token, head) row for q/k norm + rotary (two
// passes over the row: its sum of squares, then the outputs; the second pass
// reads the row back from L1/L2), bf16x2 accesses, fp32 math. The backward
// kernels accumulate grad_weight per warp in shared memory (each lane owns
// its columns, so no atomics), sum the warps per block into a [blocks, cols]
// partial, and a second kernel sums the blocks in order: deterministic.
// SwiGLU is elementwise, bf16x2 per thread.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/common/dependent_launch.cuh"
#include "kernels/common/device_math.cuh"
#include "kernels/fused/fused_launch.h"
#include "kernels/fused/rms_norm_row.cuh"

namespace tandem::kernels::detail {
namespace {

using bf16 = __nv_bfloat16;
using bf162 = __nv_bfloat162;

constexpr int kFwdWarps = 8;
constexpr int kMaxFwdBlocks = 8192;
constexpr int kMaxBwdBlocks = 1024;
constexpr int kSmemBudget = 48 * 1024;
// RMSNorm forward over at most this many rows runs a block per row.
constexpr int64_t kRowKernelMaxRows = 1024;

__device__ __forceinline__ float2 Ld(const bf16* p) { return __bfloat1622float2(*reinterpret_cast<const bf162*>(p)); }
__device__ __forceinline__ void St(bf16* p, float a, float b) {
  *reinterpret_cast<bf162*>(p) = __floats2bfloat162_rn(a, b);
}

int BwdWarps(int cols) { return std::clamp(kSmemBudget / (cols * 4), 1, 8); }

__global__ void RmsNormFwdKernel(int64_t rows, int cols, float eps, const bf16* __restrict__ x,
                                 const bf16* __restrict__ res, const bf16* __restrict__ w, bf16* sum_out,
                                 bf16* __restrict__ y) {
  const int lane = threadIdx.x & 31;
  const int64_t nw = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; r < rows; r += nw) {
    const int64_t o = r * cols;
    const bf16* h = x + o;
    float ss = 0.f;
    if (res != nullptr) {
      for (int c = 2 * lane; c < cols; c += 64) {
        const float2 a = Ld(x + o + c), b = Ld(res + o + c);
        const bf162 hv = __floats2bfloat162_rn(a.x + b.x, a.y + b.y);
        *reinterpret_cast<bf162*>(sum_out + o + c) = hv;  // this lane reads it back below
        const float2 hf = __bfloat1622float2(hv);
        ss += hf.x * hf.x + hf.y * hf.y;
      }
      h = sum_out + o;
    } else {
      for (int c = 2 * lane; c < cols; c += 64) {
        const float2 a = Ld(h + c);
        ss += a.x * a.x + a.y * a.y;
      }
    }
    const float rstd = rsqrtf(WarpSum(ss) / cols + eps);
    for (int c = 2 * lane; c < cols; c += 64) {
      const float2 a = Ld(h + c), wv = Ld(w + c);
      St(y + o + c, wv.x * Rb(a.x * rstd), wv.y * Rb(a.y * rstd));
    }
  }
}

// The same math for few rows (a decode step's): a block per row, so that a
// row of C takes C / (2 * blockDim) dependent loads per thread instead of
// C / 64 (one warp per row spends ~8 us on a row of 1024, its loads one
// after another: 31% of a decode step at batch 1 on an H100). The sum of
// squares is added in another order than the warp kernel's (fp32: rstd may
// differ in its last bit, an output by one bf16 ulp).
__global__ void RmsNormFwdRowKernel(int64_t rows, int cols, float eps, const bf16* __restrict__ x,
                                    const bf16* __restrict__ res, const bf16* __restrict__ w, bf16* sum_out,
                                    bf16* y) {
  __shared__ float warp_sums[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t o = r * cols;
    RmsNormRow(cols, eps, x + o, res != nullptr ? res + o : nullptr, w, res != nullptr ? sum_out + o : nullptr,
               nullptr, y + o, warp_sums);
  }
}

// Sums the warps' grad_weight rows of this block into partial[blockIdx.x].
__device__ void FlushWarpSums(const float* sdw, int warps, int cols, float* partial) {
  __syncthreads();
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    float s = 0.f;
    for (int w = 0; w < warps; ++w) s += sdw[w * cols + c];
    partial[static_cast<int64_t>(blockIdx.x) * cols + c] = s;
  }
}

__global__ void RmsNormBwdKernel(int64_t rows, int cols, float eps, const bf16* __restrict__ h,
                                 const bf16* __restrict__ w, const bf16* __restrict__ gy,
                                 const bf16* __restrict__ gh, bf16* __restrict__ gin, float* __restrict__ partial) {
  extern __shared__ float sdw[];
  const int lane = threadIdx.x & 31, warps = blockDim.x / 32;
  float* my = sdw + (threadIdx.x / 32) * cols;
  for (int c = 2 * lane; c < cols; c += 64) my[c] = my[c + 1] = 0.f;
  const int64_t nw = static_cast<int64_t>(gridDim.x) * warps;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * warps + threadIdx.x / 32; r < rows; r += nw) {
    const int64_t o = r * cols;
    float ss = 0.f, dot = 0.f;
    for (int c = 2 * lane; c < cols; c += 64) {
      const float2 a = Ld(h + o + c), g = Ld(gy + o + c), wv = Ld(w + c);
      ss += a.x * a.x + a.y * a.y;
      dot += Rb(g.x * wv.x) * a.x + Rb(g.y * wv.y) * a.y;
    }
    const float rstd = rsqrtf(WarpSum(ss) / cols + eps);
    const float coef = rstd * rstd * rstd * WarpSum(dot) / cols;
    for (int c = 2 * lane; c < cols; c += 64) {
      const float2 a = Ld(h + o + c), g = Ld(gy + o + c), wv = Ld(w + c);
      float dx0 = rstd * Rb(g.x * wv.x) - a.x * coef, dx1 = rstd * Rb(g.y * wv.y) - a.y * coef;
      if (gh != nullptr) {
        const float2 e = Ld(gh + o + c);
        dx0 += e.x, dx1 += e.y;
      }
      St(gin + o + c, dx0, dx1);
      my[c] += Rb(g.x * Rb(a.x * rstd));
      my[c + 1] += Rb(g.y * Rb(a.y * rstd));
    }
  }
  FlushWarpSums(sdw, warps, cols, partial);
}

// One (token, head) row of q/k norm + rotary, by one warp: x and y the
// row's D elements, w the norm weight, cosv/sinv the token's tables.
__device__ __forceinline__ void NormRotaryRow(int lane, int dim, float eps, const bf16* __restrict__ x,
                                              const bf16* __restrict__ w, const bf16* __restrict__ cosv,
                                              const bf16* __restrict__ sinv, bf16* __restrict__ y) {
  const int half = dim / 2;
  float ss = 0.f;
  for (int i = 2 * lane; i < half; i += 64) {
    const float2 a = Ld(x + i), b = Ld(x + i + half);
    ss += a.x * a.x + a.y * a.y + b.x * b.x + b.y * b.y;
  }
  const float rstd = rsqrtf(WarpSum(ss) / dim + eps);
  for (int i = 2 * lane; i < half; i += 64) {
    const float2 a = Ld(x + i), b = Ld(x + i + half), wa = Ld(w + i), wb = Ld(w + i + half);
    const float2 c1 = Ld(cosv + i), c2 = Ld(cosv + i + half);
    const float2 s1 = Ld(sinv + i), s2 = Ld(sinv + i + half);
    const float n1x = Rb(wa.x * Rb(a.x * rstd)), n1y = Rb(wa.y * Rb(a.y * rstd));
    const float n2x = Rb(wb.x * Rb(b.x * rstd)), n2y = Rb(wb.y * Rb(b.y * rstd));
    St(y + i, Rb(n1x * c1.x) - Rb(n2x * s1.x), Rb(n1y * c1.y) - Rb(n2y * s1.y));
    St(y + i + half, Rb(n2x * c2.x) + Rb(n1x * s2.x), Rb(n2y * c2.y) + Rb(n1y * s2.y));
  }
}

__global__ void QkRotaryFwdKernel(int64_t rows, int heads, int dim, float eps, const bf16* __restrict__ x,
                                  const bf16* __restrict__ w, const bf16* __restrict__ cosv,
                                  const bf16* __restrict__ sinv, bf16* __restrict__ y) {
  const int lane = threadIdx.x & 31;
  const int64_t nw = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; r < rows; r += nw) {
    const int64_t o = r * dim, t = (r / heads) * dim;
    NormRotaryRow(lane, dim, eps, x + o, w, cosv + t, sinv + t, y + o);
  }
}

// Decode's q/k/v glue (fused_cuda.h QkvRotaryKvWriteCuda): one warp per
// (token, head) row of the fused projection's output, q heads, then k
// heads, then v heads. A dependent launch (dependent_launch.cuh): it starts
// during the projection's tail and waits for it, saving its launch.
__global__ void QkvRotaryKvWriteKernel(int64_t tokens, int q_heads, int kv_heads, int dim, int64_t row_stride,
                                       int64_t num_slots, float eps, const bf16* __restrict__ qkv,
                                       const bf16* __restrict__ q_weight, const bf16* __restrict__ k_weight,
                                       const bf16* __restrict__ cosv, const bf16* __restrict__ sinv,
                                       const int64_t* __restrict__ slots, bf16* __restrict__ q_out,
                                       bf16* __restrict__ key_slots, bf16* __restrict__ value_slots) {
  LetDependentsLaunch();  // the attention after it may start
  WaitForPriorKernels();  // a dependent launch: the q/k/v projection before it wrote qkv
  const int lane = threadIdx.x & 31, per_token = q_heads + 2 * kv_heads;
  const int64_t rows = tokens * per_token, nw = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; r < rows; r += nw) {
    const int64_t t = r / per_token;
    const int h = static_cast<int>(r % per_token);
    const bf16* x = qkv + t * row_stride + static_cast<int64_t>(h) * dim;
    if (h < q_heads) {
      NormRotaryRow(lane, dim, eps, x, q_weight, cosv + t * dim, sinv + t * dim,
                    q_out + (t * q_heads + h) * dim);
      continue;
    }
    const int64_t slot = slots[t];
    if (slot < 0 || slot >= num_slots) continue;  // a padded row (PagedKvWriteCuda skips it too)
    if (h < q_heads + kv_heads) {
      NormRotaryRow(lane, dim, eps, x, k_weight, cosv + t * dim, sinv + t * dim,
                    key_slots + (slot * kv_heads + (h - q_heads)) * dim);
    } else {
      bf16* y = value_slots + (slot * kv_heads + (h - q_heads - kv_heads)) * dim;
      for (int i = 2 * lane; i < dim; i += 64) *reinterpret_cast<bf162*>(y + i) = *reinterpret_cast<const bf162*>(x + i);
    }
  }
}

__global__ void QkRotaryBwdKernel(int64_t rows, int heads, int dim, float eps, const bf16* __restrict__ x,
                                  const bf16* __restrict__ w, const bf16* __restrict__ cosv,
                                  const bf16* __restrict__ sinv, const bf16* __restrict__ gy,
                                  bf16* __restrict__ gx, float* __restrict__ partial) {
  extern __shared__ float sdw[];
  const int lane = threadIdx.x & 31, warps = blockDim.x / 32, half = dim / 2;
  float* my = sdw + (threadIdx.x / 32) * dim;
  for (int i = 2 * lane; i < half; i += 64) my[i] = my[i + 1] = my[i + half] = my[i + half + 1] = 0.f;
  const int64_t nw = static_cast<int64_t>(gridDim.x) * warps;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * warps + threadIdx.x / 32; r < rows; r += nw) {
    const int64_t o = r * dim, t = (r / heads) * dim;
    float ss = 0.f, dot = 0.f;
    // dn (the gradient of the normed row) from the rotary's transpose.
    auto grads = [&](int i, float2& d1, float2& d2) {
      const float2 g1 = Ld(gy + o + i), g2 = Ld(gy + o + i + half);
      const float2 c1 = Ld(cosv + t + i), c2 = Ld(cosv + t + i + half);
      const float2 s1 = Ld(sinv + t + i), s2 = Ld(sinv + t + i + half);
      d1 = make_float2(Rb(g1.x * c1.x + g2.x * s2.x), Rb(g1.y * c1.y + g2.y * s2.y));
      d2 = make_float2(Rb(g2.x * c2.x - g1.x * s1.x), Rb(g2.y * c2.y - g1.y * s1.y));
    };
    for (int i = 2 * lane; i < half; i += 64) {
      float2 d1, d2;
      grads(i, d1, d2);
      const float2 a = Ld(x + o + i), b = Ld(x + o + i + half), wa = Ld(w + i), wb = Ld(w + i + half);
      ss += a.x * a.x + a.y * a.y + b.x * b.x + b.y * b.y;
      dot += Rb(d1.x * wa.x) * a.x + Rb(d1.y * wa.y) * a.y + Rb(d2.x * wb.x) * b.x + Rb(d2.y * wb.y) * b.y;
    }
    const float rstd = rsqrtf(WarpSum(ss) / dim + eps);
    const float coef = rstd * rstd * rstd * WarpSum(dot) / dim;
    for (int i = 2 * lane; i < half; i += 64) {
      float2 d1, d2;
      grads(i, d1, d2);
      const float2 a = Ld(x + o + i), b = Ld(x + o + i + half), wa = Ld(w + i), wb = Ld(w + i + half);
      St(gx + o + i, rstd * Rb(d1.x * wa.x) - a.x * coef, rstd * Rb(d1.y * wa.y) - a.y * coef);
      St(gx + o + i + half, rstd * Rb(d2.x * wb.x) - b.x * coef, rstd * Rb(d2.y * wb.y) - b.y * coef);
      my[i] += Rb(d1.x * Rb(a.x * rstd));
      my[i + 1] += Rb(d1.y * Rb(a.y * rstd));
      my[i + half] += Rb(d2.x * Rb(b.x * rstd));
      my[i + half + 1] += Rb(d2.y * Rb(b.y * rstd));
    }
  }
  FlushWarpSums(sdw, warps, dim, partial);
}

// grad_weight[c] = sum over blocks of partial[b, c], in block order.
__global__ void SumPartialsKernel(int blocks, int cols, const float* __restrict__ partial, float* __restrict__ out) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float s = 0.f;
  for (int b = 0; b < blocks; ++b) s += partial[static_cast<int64_t>(b) * cols + c];
  out[c] = s;
}


__global__ void SwigluFwdKernel(int64_t n, const bf16* __restrict__ gate, const bf16* __restrict__ up,
                                bf16* __restrict__ y) {
  const int64_t pairs = n / 2, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < pairs; p += stride) {
    const float2 g = Ld(gate + 2 * p), u = Ld(up + 2 * p);
    St(y + 2 * p, Rb(g.x * Sigmoid(g.x)) * u.x, Rb(g.y * Sigmoid(g.y)) * u.y);
  }
  if ((n & 1) && blockIdx.x == 0 && threadIdx.x == 0) {
    const float g = __bfloat162float(gate[n - 1]);
    y[n - 1] = __float2bfloat16_rn(Rb(g * Sigmoid(g)) * __bfloat162float(up[n - 1]));
  }
}

// gate_up [rows, 2 * inter] (gate columns, then up) -> y [rows, inter].
__global__ void SwigluPackedFwdKernel(int64_t rows, int64_t inter, const bf16* __restrict__ gate_up,
                                      bf16* __restrict__ y) {
  const int64_t half = inter / 2, pairs = rows * half, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < pairs; p += stride) {
    const int64_t r = p / half, c = 2 * (p % half);
    const float2 g = Ld(gate_up + r * 2 * inter + c), u = Ld(gate_up + r * 2 * inter + inter + c);
    St(y + r * inter + c, Rb(g.x * Sigmoid(g.x)) * u.x, Rb(g.y * Sigmoid(g.y)) * u.y);
  }
}

__device__ __forceinline__ void SwigluGrad(float g, float u, float dy, float& dg, float& du) {
  const float sig = Sigmoid(g);
  du = dy * Rb(g * sig);
  dg = Rb(dy * u) * sig * (1.f + g * (1.f - sig));
}

__global__ void SwigluBwdKernel(int64_t n, const bf16* __restrict__ gate, const bf16* __restrict__ up,
                                const bf16* __restrict__ gy, bf16* __restrict__ gg, bf16* __restrict__ gu) {
  const int64_t pairs = n / 2, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < pairs; p += stride) {
    const float2 g = Ld(gate + 2 * p), u = Ld(up + 2 * p), d = Ld(gy + 2 * p);
    float dg0, du0, dg1, du1;
    SwigluGrad(g.x, u.x, d.x, dg0, du0);
    SwigluGrad(g.y, u.y, d.y, dg1, du1);
    St(gg + 2 * p, dg0, dg1);
    St(gu + 2 * p, du0, du1);
  }
  if ((n & 1) && blockIdx.x == 0 && threadIdx.x == 0) {
    float dg, du;
    SwigluGrad(__bfloat162float(gate[n - 1]), __bfloat162float(up[n - 1]), __bfloat162float(gy[n - 1]), dg, du);
    gg[n - 1] = __float2bfloat16_rn(dg);
    gu[n - 1] = __float2bfloat16_rn(du);
  }
}

unsigned FwdBlocks(int64_t rows) {
  return static_cast<unsigned>(std::clamp<int64_t>((rows + kFwdWarps - 1) / kFwdWarps, 1, kMaxFwdBlocks));
}

cudaError_t SumPartials(int blocks, int cols, const float* partial, float* out, cudaStream_t s) {
  SumPartialsKernel<<<(cols + 255) / 256, 256, 0, s>>>(blocks, cols, partial, out);
  return cudaGetLastError();
}

}  // namespace

int FusedNormBackwardBlocks(int64_t rows, int cols) {
  const int warps = BwdWarps(cols);
  return static_cast<int>(std::clamp<int64_t>((rows + warps - 1) / warps, 1, kMaxBwdBlocks));
}

cudaError_t LaunchRmsNormForward(int64_t rows, int cols, float eps, const bf16* x, const bf16* residual,
                                 const bf16* weight, bf16* sum_out, bf16* y, cudaStream_t s) {
  if (rows <= kRowKernelMaxRows) {  // few rows: a block each (latency), up to 256 threads of 2 columns
    const int threads = std::clamp((cols / 2 + 31) / 32 * 32, 32, 256);
    RmsNormFwdRowKernel<<<static_cast<unsigned>(std::max<int64_t>(rows, 1)), threads, 0, s>>>(
        rows, cols, eps, x, residual, weight, sum_out, y);
  } else {
    RmsNormFwdKernel<<<FwdBlocks(rows), kFwdWarps * 32, 0, s>>>(rows, cols, eps, x, residual, weight, sum_out, y);
  }
  return cudaGetLastError();
}

cudaError_t LaunchRmsNormBackward(int64_t rows, int cols, float eps, const bf16* h, const bf16* weight,
                                  const bf16* grad_y, const bf16* grad_h, bf16* grad_in, float* partial,
                                  float* grad_weight, cudaStream_t s) {
  const int warps = BwdWarps(cols), blocks = FusedNormBackwardBlocks(rows, cols);
  RmsNormBwdKernel<<<blocks, warps * 32, static_cast<size_t>(warps) * cols * sizeof(float), s>>>(
      rows, cols, eps, h, weight, grad_y, grad_h, grad_in, partial);
  const cudaError_t e = cudaGetLastError();
  return e != cudaSuccess ? e : SumPartials(blocks, cols, partial, grad_weight, s);
}

cudaError_t LaunchQkNormRotaryForward(int64_t tokens, int heads, int dim, float eps, const bf16* x,
                                      const bf16* weight, const bf16* cos, const bf16* sin, bf16* y,
                                      cudaStream_t s) {
  const int64_t rows = tokens * heads;
  QkRotaryFwdKernel<<<FwdBlocks(rows), kFwdWarps * 32, 0, s>>>(rows, heads, dim, eps, x, weight, cos, sin, y);
  return cudaGetLastError();
}

cudaError_t LaunchQkvRotaryKvWrite(int64_t tokens, int q_heads, int kv_heads, int dim, int64_t row_stride,
                                   int64_t num_slots, float eps, const bf16* qkv, const bf16* q_weight,
                                   const bf16* k_weight, const bf16* cos, const bf16* sin, const int64_t* slots,
                                   bf16* q_out, bf16* key_slots, bf16* value_slots, cudaStream_t s) {
  const int64_t rows = tokens * (q_heads + 2 * kv_heads);
  return LaunchDependent(&QkvRotaryKvWriteKernel, dim3(FwdBlocks(rows)), dim3(kFwdWarps * 32), 0, s, tokens, q_heads,
                         kv_heads, dim, row_stride, num_slots, eps, qkv, q_weight, k_weight, cos, sin, slots, q_out,
                         key_slots, value_slots);
}

cudaError_t LaunchQkNormRotaryBackward(int64_t tokens, int heads, int dim, float eps, const bf16* x,
                                       const bf16* weight, const bf16* cos, const bf16* sin, const bf16* grad_y,
                                       bf16* grad_x, float* partial, float* grad_weight, cudaStream_t s) {
  const int64_t rows = tokens * heads;
  const int warps = BwdWarps(dim), blocks = FusedNormBackwardBlocks(rows, dim);
  QkRotaryBwdKernel<<<blocks, warps * 32, static_cast<size_t>(warps) * dim * sizeof(float), s>>>(
      rows, heads, dim, eps, x, weight, cos, sin, grad_y, grad_x, partial);
  const cudaError_t e = cudaGetLastError();
  return e != cudaSuccess ? e : SumPartials(blocks, dim, partial, grad_weight, s);
}

cudaError_t LaunchSwigluForward(int64_t n, const bf16* gate, const bf16* up, bf16* y, cudaStream_t s) {
  const unsigned blocks = static_cast<unsigned>(std::clamp<int64_t>((n / 2 + 255) / 256, 1, 132 * 16));
  SwigluFwdKernel<<<blocks, 256, 0, s>>>(n, gate, up, y);
  return cudaGetLastError();
}

cudaError_t LaunchSwigluPackedForward(int64_t rows, int64_t inter, const bf16* gate_up, bf16* y, cudaStream_t s) {
  const unsigned blocks = static_cast<unsigned>(std::clamp<int64_t>((rows * inter / 2 + 255) / 256, 1, 132 * 16));
  SwigluPackedFwdKernel<<<blocks, 256, 0, s>>>(rows, inter, gate_up, y);
  return cudaGetLastError();
}

cudaError_t LaunchSwigluBackward(int64_t n, const bf16* gate, const bf16* up, const bf16* grad_y, bf16* grad_gate,
                                 bf16* grad_up, cudaStream_t s) {
  const unsigned blocks = static_cast<unsigned>(std::clamp<int64_t>((n / 2 + 255) / 256, 1, 132 * 16));
  SwigluBwdKernel<<<blocks, 256, 0, s>>>(n, gate, up, grad_y, grad_gate, grad_up);
  return cudaGetLastError();
}

}  // namespace tandem::kernels::detail
