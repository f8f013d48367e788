// Chunked LM-head loss kernels (lm_head_loss_launch.h): one block per logits
// row for the row statistics and the logits gradient (16-byte loads where the
// row is aligned), one warp per pair for the label log-probs. Memory-bound
// passes over a chunk that cuBLAS just wrote.
#include <cfloat>

#include "kernels/lm_head_loss/lm_head_loss_launch.h"

namespace tandem::kernels::detail {
namespace {

constexpr int kThreads = 512;

// Online softmax state: max m, S = sum e^(z-m), A = sum e^(z-m) z.
struct Stat {
  float m, s, a;
};

__device__ __forceinline__ Stat Combine(Stat x, Stat y) {
  const float m = fmaxf(x.m, y.m);
  if (m == -INFINITY) return {m, 0.f, 0.f};
  const float cx = __expf(x.m - m), cy = __expf(y.m - m);
  return {m, x.s * cx + y.s * cy, x.a * cx + y.a * cy};
}

__device__ __forceinline__ void Push(Stat& st, float z) {
  if (z > st.m) {
    const float c = __expf(st.m - z);
    st.s *= c;
    st.a *= c;
    st.m = z;
  }
  const float e = __expf(z - st.m);
  st.s += e;
  st.a += e * z;
}

__global__ void __launch_bounds__(kThreads) RowStatsKernel(const float* logits, int32_t V, float inv_t, float* lse,
                                                           float* entropy) {
  const int64_t r = blockIdx.x;
  const float* row = logits + r * V;
  Stat st{-INFINITY, 0.f, 0.f};
  if (V % 4 == 0) {
    const float4* row4 = reinterpret_cast<const float4*>(row);
    for (int i = threadIdx.x; i < V / 4; i += kThreads) {
      const float4 x = row4[i];
      Push(st, x.x * inv_t);
      Push(st, x.y * inv_t);
      Push(st, x.z * inv_t);
      Push(st, x.w * inv_t);
    }
  } else {
    for (int i = threadIdx.x; i < V; i += kThreads) Push(st, row[i] * inv_t);
  }
  for (int o = 16; o > 0; o /= 2) {
    Stat other{__shfl_xor_sync(0xffffffffu, st.m, o), __shfl_xor_sync(0xffffffffu, st.s, o),
               __shfl_xor_sync(0xffffffffu, st.a, o)};
    st = Combine(st, other);
  }
  __shared__ Stat warp_stats[kThreads / 32];
  if (threadIdx.x % 32 == 0) warp_stats[threadIdx.x / 32] = st;
  __syncthreads();
  if (threadIdx.x == 0) {
    Stat t = warp_stats[0];
    for (int w = 1; w < kThreads / 32; ++w) t = Combine(t, warp_stats[w]);
    const float l = t.m + logf(t.s);
    lse[r] = l;
    if (entropy != nullptr) entropy[r] = l - t.a / t.s;
  }
}

__global__ void PairLogprobKernel(const __nv_bfloat16* hidden, const __nv_bfloat16* weight, const int32_t* rows,
                                  const int32_t* labels, int64_t M, int64_t N, int32_t H, int32_t V, float inv_t,
                                  const float* lse, float* logprob) {
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (i >= M) return;
  const int32_t r = rows[i], l = labels[i];
  if (r < 0 || r >= N || l < 0 || l >= V) {
    if (lane == 0) logprob[i] = NAN;
    return;
  }
  const __nv_bfloat16* h = hidden + static_cast<int64_t>(r) * H;
  const __nv_bfloat16* w = weight + static_cast<int64_t>(l) * H;
  float acc = 0.f;
  if (H % 8 == 0) {
    for (int x = lane * 8; x < H; x += 32 * 8) {
      const uint4 hv = *reinterpret_cast<const uint4*>(h + x);
      const uint4 wv = *reinterpret_cast<const uint4*>(w + x);
      const __nv_bfloat162* hp = reinterpret_cast<const __nv_bfloat162*>(&hv);
      const __nv_bfloat162* wp = reinterpret_cast<const __nv_bfloat162*>(&wv);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 a = __bfloat1622float2(hp[j]), b = __bfloat1622float2(wp[j]);
        acc += a.x * b.x + a.y * b.y;
      }
    }
  } else {
    for (int x = lane; x < H; x += 32) acc += __bfloat162float(h[x]) * __bfloat162float(w[x]);
  }
  for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) logprob[i] = acc * inv_t - lse[r];
}

__global__ void GradSumKernel(const int32_t* rows, const float* g, int64_t M, int64_t N, float* gsum) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < M && rows[i] >= 0 && rows[i] < N) atomicAdd(gsum + rows[i], g[i]);
}

__global__ void __launch_bounds__(kThreads) DzKernel(const float* logits, int64_t r0, int32_t V, float inv_t,
                                                     const float* lse, const float* entropy, const float* gsum,
                                                     const float* grad_entropy, __nv_bfloat16* dz) {
  const int64_t i = blockIdx.x, r = r0 + i;
  const float* row = logits + i * V;
  __nv_bfloat16* out = dz + i * V;
  const float l = lse[r], ent = entropy[r];
  const float G = gsum != nullptr ? gsum[r] : 0.f;
  const float ge = grad_entropy != nullptr ? grad_entropy[r] : 0.f;
  // dz = (-G p - ge p (z - lse + ent)) / T = p * (-(G + ge (z - l + ent))) / T
  auto f = [&](float x) {
    const float z = x * inv_t;
    const float p = __expf(z - l);
    return -p * (G + ge * (z - l + ent)) * inv_t;
  };
  if (V % 4 == 0) {
    const float4* row4 = reinterpret_cast<const float4*>(row);
    __nv_bfloat162* out2 = reinterpret_cast<__nv_bfloat162*>(out);
    for (int j = threadIdx.x; j < V / 4; j += kThreads) {
      const float4 x = row4[j];
      out2[2 * j] = __floats2bfloat162_rn(f(x.x), f(x.y));
      out2[2 * j + 1] = __floats2bfloat162_rn(f(x.z), f(x.w));
    }
  } else {
    for (int j = threadIdx.x; j < V; j += kThreads) out[j] = __float2bfloat16(f(row[j]));
  }
}

__global__ void ScatterLabelsKernel(const int32_t* rows, const int32_t* labels, const float* g, int64_t M, int64_t r0,
                                    int64_t nrows, int32_t V, float inv_t, __nv_bfloat16* dz) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= M) return;
  const int64_t r = rows[i] - r0;
  const int32_t l = labels[i];
  if (r < 0 || r >= nrows || l < 0 || l >= V) return;
  atomicAdd(dz + r * V + l, __float2bfloat16(g[i] * inv_t));
}

}  // namespace

cudaError_t LaunchRowStats(const float* logits, int64_t rows, int32_t V, float inv_t, float* lse, float* entropy,
                           cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  RowStatsKernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(logits, V, inv_t, lse, entropy);
  return cudaGetLastError();
}

cudaError_t LaunchPairLogprob(const __nv_bfloat16* hidden, const __nv_bfloat16* weight, const int32_t* rows,
                              const int32_t* labels, int64_t M, int64_t N, int32_t H, int32_t V, float inv_t,
                              const float* lse, float* logprob, cudaStream_t s) {
  if (M == 0) return cudaSuccess;
  PairLogprobKernel<<<static_cast<unsigned>((M * 32 + 255) / 256), 256, 0, s>>>(hidden, weight, rows, labels, M, N, H,
                                                                                V, inv_t, lse, logprob);
  return cudaGetLastError();
}

cudaError_t LaunchGradSum(const int32_t* rows, const float* g, int64_t M, int64_t N, float* gsum, cudaStream_t s) {
  if (M == 0) return cudaSuccess;
  GradSumKernel<<<static_cast<unsigned>((M + 255) / 256), 256, 0, s>>>(rows, g, M, N, gsum);
  return cudaGetLastError();
}

cudaError_t LaunchLogitsGrad(const float* logits, int64_t r0, int64_t rows, int32_t V, float inv_t, const float* lse,
                             const float* entropy, const float* gsum, const float* grad_entropy,
                             const int32_t* pair_rows, const int32_t* labels, const float* grad_logprob, int64_t M,
                             __nv_bfloat16* dz, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  DzKernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(logits, r0, V, inv_t, lse, entropy, gsum, grad_entropy,
                                                            dz);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess || M == 0 || grad_logprob == nullptr) return e;
  ScatterLabelsKernel<<<static_cast<unsigned>((M + 255) / 256), 256, 0, s>>>(pair_rows, labels, grad_logprob, M, r0,
                                                                             rows, V, inv_t, dz);
  return cudaGetLastError();
}

}  // namespace tandem::kernels::detail
