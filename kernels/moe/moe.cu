// MoE kernels (moe_launch.h): router and its backward (warp per token, scores
// staged in shared memory), a deterministic stable counting sort for the
// permutation (per-chunk histograms, a scan per expert over chunks, then
// ranks inside a chunk by warp match), row gathers and weighted row sums with
// 16-byte accesses, and SwiGLU forward/backward.
#include <cfloat>
#include <climits>

#include "kernels/common/device_math.cuh"
#include "kernels/moe/moe_launch.h"

namespace tandem::kernels::detail {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kChunk = 4096;  // permutation items per chunk

// Warp argmax over smem values (higher value, then lower index wins).
__device__ __forceinline__ int WarpArgmax(const float* v, int E, int lane) {
  float best = -INFINITY;
  int idx = INT_MAX;
  for (int e = lane; e < E; e += 32) {
    if (v[e] > best || (v[e] == best && e < idx)) best = v[e], idx = e;
  }
  for (int o = 16; o > 0; o /= 2) {
    const float ob = __shfl_xor_sync(0xffffffffu, best, o);
    const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
    if (ob > best || (ob == best && oi < idx)) best = ob, idx = oi;
  }
  return idx;
}

__global__ void RouterKernel(int64_t T, int32_t E, int32_t K, bool sigmoid, bool renorm, const float* logits,
                             float* scores, int32_t* topk_idx, float* topk_weight, int32_t* counts, float* score_sum) {
  extern __shared__ float sm[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  if (t >= T) return;
  float* v = sm + warp * E;
  const float* l = logits + t * E;
  if (sigmoid) {
    for (int e = lane; e < E; e += 32) v[e] = 1.f / (1.f + __expf(-l[e]));
  } else {
    float mx = -INFINITY;
    for (int e = lane; e < E; e += 32) mx = fmaxf(mx, l[e]);
    for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float sum = 0.f;
    for (int e = lane; e < E; e += 32) sum += (v[e] = __expf(l[e] - mx));
    sum = WarpSum(sum);
    for (int e = lane; e < E; e += 32) v[e] /= sum;
  }
  for (int e = lane; e < E; e += 32) {
    scores[t * E + e] = v[e];
    atomicAdd(score_sum + e, v[e]);
  }
  __syncwarp();
  float sel = 0.f;
  for (int j = 0; j < K; ++j) {  // k rounds of argmax; chosen entries marked -inf in smem
    const int e = WarpArgmax(v, E, lane);
    const float sc = scores[t * E + e];
    sel += sc;
    if (lane == 0) {
      topk_idx[t * K + j] = e;
      topk_weight[t * K + j] = sc;
      atomicAdd(counts + e, 1);
    }
    __syncwarp();
    if (lane == 0) v[e] = -INFINITY;
    __syncwarp();
  }
  if (renorm) {
    for (int j = lane; j < K; j += 32) topk_weight[t * K + j] /= sel;
  }
}

__global__ void RouterBackwardKernel(int64_t T, int32_t E, int32_t K, bool sigmoid, bool renorm, const float* scores,
                                     const int32_t* topk_idx, const float* topk_weight, const float* gw,
                                     const float* gsum, float* grad_logits) {
  extern __shared__ float sm[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  if (t >= T) return;
  float* ds = sm + warp * E;
  const float* sc = scores + t * E;
  for (int e = lane; e < E; e += 32) ds[e] = gsum != nullptr ? gsum[e] : 0.f;
  float sel = 0.f, gdotw = 0.f;
  for (int j = 0; j < K; ++j) {
    sel += sc[topk_idx[t * K + j]];
    gdotw += gw[t * K + j] * topk_weight[t * K + j];
  }
  __syncwarp();
  if (lane == 0) {
    for (int j = 0; j < K; ++j) {
      const int e = topk_idx[t * K + j];
      ds[e] += renorm ? (gw[t * K + j] - gdotw) / sel : gw[t * K + j];
    }
  }
  __syncwarp();
  if (sigmoid) {
    for (int e = lane; e < E; e += 32) grad_logits[t * E + e] = ds[e] * sc[e] * (1.f - sc[e]);
  } else {
    float sds = 0.f;
    for (int e = lane; e < E; e += 32) sds += sc[e] * ds[e];
    sds = WarpSum(sds);
    for (int e = lane; e < E; e += 32) grad_logits[t * E + e] = sc[e] * (ds[e] - sds);
  }
}

// Per chunk of kChunk items: histogram of experts -> chunk_counts[c * E + e].
__global__ void ChunkHistogramKernel(int64_t n, int32_t E, const int32_t* idx, int32_t* chunk_counts) {
  extern __shared__ int32_t hist[];
  for (int e = threadIdx.x; e < E; e += blockDim.x) hist[e] = 0;
  __syncthreads();
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kChunk;
  for (int64_t i = c0 + threadIdx.x; i < min(n, c0 + kChunk); i += blockDim.x) {
    const int32_t e = idx[i];
    if (e >= 0 && e < E) atomicAdd(hist + e, 1);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) chunk_counts[static_cast<int64_t>(blockIdx.x) * E + e] = hist[e];
}

// One block: offsets[e] (exclusive scan of totals) and chunk_counts turned into
// each chunk's first row per expert.
__global__ void ScanKernel(int64_t chunks, int32_t E, int32_t* chunk_counts, int32_t* offsets) {
  extern __shared__ int32_t totals[];
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int32_t run = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      const int32_t v = chunk_counts[c * E + e];
      chunk_counts[c * E + e] = run;
      run += v;
    }
    totals[e] = run;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t run = 0;
    for (int e = 0; e < E; ++e) {
      offsets[e] = run;
      run += totals[e];
      totals[e] = offsets[e];
    }
    offsets[E] = run;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    for (int64_t c = 0; c < chunks; ++c) chunk_counts[c * E + e] += totals[e];
  }
}

// Ranks inside a chunk, in item order: warp 0 walks the chunk 32 items at a
// time; lanes with the same expert (match_any) take consecutive rows.
__global__ void RankKernel(int64_t n, int32_t E, const int32_t* idx, const int32_t* chunk_start, int32_t* perm_pos,
                           int32_t* perm_src) {
  extern __shared__ int32_t next[];
  for (int e = threadIdx.x; e < E; e += blockDim.x) next[e] = chunk_start[static_cast<int64_t>(blockIdx.x) * E + e];
  __syncthreads();
  if (threadIdx.x >= 32) return;
  const int lane = threadIdx.x;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kChunk, c1 = min(n, c0 + kChunk);
  for (int64_t base = c0; base < c1; base += 32) {
    const int64_t i = base + lane;
    const int32_t e = i < c1 ? idx[i] : -1;
    const bool valid = e >= 0 && e < E;
    const unsigned peers = __match_any_sync(0xffffffffu, valid ? e : -1);
    const int rank = __popc(peers & ((1u << lane) - 1));
    const int32_t row = valid ? next[e] + rank : -1;
    __syncwarp();
    if (valid && rank == 0) next[e] += __popc(peers);
    __syncwarp();
    if (i < c1) {
      perm_pos[i] = row;
      if (valid) perm_src[row] = static_cast<int32_t>(i);
    }
  }
}

// Warp per row, 16-byte vectors (H % 8 == 0 is checked by the caller).
__global__ void GatherRowsKernel(int64_t rows, int32_t H, int32_t K, const uint4* x, const int32_t* perm_src,
                                 uint4* xp) {
  const int64_t r = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const int64_t t = perm_src[r] / K;
  const int V = H / 8;
  for (int c = lane; c < V; c += 32) xp[r * V + c] = x[t * V + c];
}

__device__ __forceinline__ void AddScaled(float (&acc)[8], uint4 v, float w) {
  const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(p[i]);
    acc[2 * i] += w * f.x;
    acc[2 * i + 1] += w * f.y;
  }
}
__device__ __forceinline__ uint4 Pack(const float (&acc)[8]) {
  uint4 out;
  __nv_bfloat162* p = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
  for (int i = 0; i < 4; ++i) p[i] = __floats2bfloat162_rn(acc[2 * i], acc[2 * i + 1]);
  return out;
}

// out[t] = sum_j w[t,j] src[perm_pos[t*k+j]] (w null: 1). Warp per token;
// for k <= kMaxK the k row indices and weights sit in registers and the k
// 16-byte loads of a chunk are issued before any is used.
constexpr int kMaxK = 8;
__global__ void SumRowsKernel(int64_t T, int32_t H, int32_t K, const uint4* src, const float* weight,
                              const int32_t* perm_pos, uint4* out) {
  const int64_t t = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (t >= T) return;
  const int V = H / 8;
  if (K <= kMaxK) {
    int64_t row[kMaxK];
    float w[kMaxK];
#pragma unroll
    for (int j = 0; j < kMaxK; ++j) {
      const int32_t r = j < K ? perm_pos[t * K + j] : -1;
      row[j] = r >= 0 ? static_cast<int64_t>(r) * V : -1;
      w[j] = (j < K && weight != nullptr) ? weight[t * K + j] : 1.f;
    }
    for (int c = lane; c < V; c += 32) {
      uint4 v[kMaxK];
#pragma unroll
      for (int j = 0; j < kMaxK; ++j) v[j] = row[j] >= 0 ? src[row[j] + c] : make_uint4(0, 0, 0, 0);
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
      for (int j = 0; j < kMaxK; ++j) {
        if (row[j] >= 0) AddScaled(acc, v[j], w[j]);
      }
      out[t * V + c] = Pack(acc);
    }
    return;
  }
  for (int c = lane; c < V; c += 32) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int j = 0; j < K; ++j) {
      const int32_t r = perm_pos[t * K + j];
      if (r >= 0) AddScaled(acc, src[static_cast<int64_t>(r) * V + c], weight != nullptr ? weight[t * K + j] : 1.f);
    }
    out[t * V + c] = Pack(acc);
  }
}

__global__ void UnpermuteBackwardKernel(int64_t T, int32_t H, int32_t K, const uint4* dout, const uint4* yp,
                                        const float* topk_weight, const int32_t* perm_pos, uint4* dyp, float* dw) {
  const int64_t t = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (t >= T) return;
  const int V = H / 8;
  for (int j = 0; j < K; ++j) {
    const int32_t r = perm_pos[t * K + j];
    if (r < 0) continue;
    const float w = topk_weight[t * K + j];
    float dot = 0.f;
    for (int c = lane; c < V; c += 32) {
      const uint4 g = dout[t * V + c], y = yp[static_cast<int64_t>(r) * V + c];
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      AddScaled(acc, g, w);
      dyp[static_cast<int64_t>(r) * V + c] = Pack(acc);
      const __nv_bfloat162* gp = reinterpret_cast<const __nv_bfloat162*>(&g);
      const __nv_bfloat162* yq = reinterpret_cast<const __nv_bfloat162*>(&y);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 a = __bfloat1622float2(gp[i]), b = __bfloat1622float2(yq[i]);
        dot += a.x * b.x + a.y * b.y;
      }
    }
    dot = WarpSum(dot);
    if (lane == 0) dw[t * K + j] = dot;
  }
}

__global__ void SwigluKernel(int64_t rows, int32_t I, const __nv_bfloat16* gu, __nv_bfloat16* act) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * I) return;
  const int64_t r = i / I, c = i % I;
  const float g = __bfloat162float(gu[r * 2 * I + c]), u = __bfloat162float(gu[r * 2 * I + I + c]);
  act[i] = __float2bfloat16(g / (1.f + __expf(-g)) * u);
}

__global__ void SwigluBackwardKernel(int64_t rows, int32_t I, const __nv_bfloat16* gu, const __nv_bfloat16* dact,
                                     __nv_bfloat16* dgu) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * I) return;
  const int64_t r = i / I, c = i % I;
  const float g = __bfloat162float(gu[r * 2 * I + c]), u = __bfloat162float(gu[r * 2 * I + I + c]);
  const float d = __bfloat162float(dact[i]);
  const float sg = 1.f / (1.f + __expf(-g));
  dgu[r * 2 * I + c] = __float2bfloat16(d * u * sg * (1.f + g * (1.f - sg)));
  dgu[r * 2 * I + I + c] = __float2bfloat16(d * g * sg);
}

unsigned Blocks(int64_t items, int per_block) { return static_cast<unsigned>((items + per_block - 1) / per_block); }

}  // namespace

cudaError_t LaunchRouter(int64_t T, int32_t E, int32_t K, bool sigmoid, bool renorm, const float* logits,
                         float* scores, int32_t* topk_idx, float* topk_weight, int32_t* counts, float* score_sum,
                         cudaStream_t s) {
  if (T == 0) return cudaSuccess;
  RouterKernel<<<Blocks(T, kWarpsPerBlock), 32 * kWarpsPerBlock, sizeof(float) * E * kWarpsPerBlock, s>>>(
      T, E, K, sigmoid, renorm, logits, scores, topk_idx, topk_weight, counts, score_sum);
  return cudaGetLastError();
}

cudaError_t LaunchRouterBackward(int64_t T, int32_t E, int32_t K, bool sigmoid, bool renorm, const float* scores,
                                 const int32_t* topk_idx, const float* topk_weight, const float* gw, const float* gsum,
                                 float* grad_logits, cudaStream_t s) {
  if (T == 0) return cudaSuccess;
  RouterBackwardKernel<<<Blocks(T, kWarpsPerBlock), 32 * kWarpsPerBlock, sizeof(float) * E * kWarpsPerBlock, s>>>(
      T, E, K, sigmoid, renorm, scores, topk_idx, topk_weight, gw, gsum, grad_logits);
  return cudaGetLastError();
}

int64_t PermuteChunks(int64_t n) { return (n + kChunk - 1) / kChunk; }

cudaError_t LaunchPermutePlan(int64_t n, int32_t E, const int32_t* idx, int32_t* offsets, int32_t* perm_pos,
                              int32_t* perm_src, int32_t* chunk_counts, cudaStream_t s) {
  const int64_t chunks = PermuteChunks(n);
  const size_t smem = sizeof(int32_t) * E;
  if (chunks > 0) {
    ChunkHistogramKernel<<<static_cast<unsigned>(chunks), 256, smem, s>>>(n, E, idx, chunk_counts);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  ScanKernel<<<1, 256, smem, s>>>(chunks, E, chunk_counts, offsets);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess || chunks == 0) return e;
  RankKernel<<<static_cast<unsigned>(chunks), 256, smem, s>>>(n, E, idx, chunk_counts, perm_pos, perm_src);
  return cudaGetLastError();
}

cudaError_t LaunchGatherRows(int64_t rows, int32_t H, int32_t K, const __nv_bfloat16* x, const int32_t* perm_src,
                             __nv_bfloat16* xp, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  GatherRowsKernel<<<Blocks(rows * 32, 256), 256, 0, s>>>(rows, H, K, reinterpret_cast<const uint4*>(x), perm_src,
                                                          reinterpret_cast<uint4*>(xp));
  return cudaGetLastError();
}

cudaError_t LaunchSumRows(int64_t T, int32_t H, int32_t K, const __nv_bfloat16* src, const float* weight,
                          const int32_t* perm_pos, __nv_bfloat16* out, cudaStream_t s) {
  if (T == 0) return cudaSuccess;
  SumRowsKernel<<<Blocks(T * 32, 256), 256, 0, s>>>(T, H, K, reinterpret_cast<const uint4*>(src), weight, perm_pos,
                                                    reinterpret_cast<uint4*>(out));
  return cudaGetLastError();
}

cudaError_t LaunchUnpermuteBackward(int64_t T, int32_t H, int32_t K, const __nv_bfloat16* dout,
                                    const __nv_bfloat16* yp, const float* topk_weight, const int32_t* perm_pos,
                                    __nv_bfloat16* dyp, float* dtopk_weight, cudaStream_t s) {
  if (T == 0) return cudaSuccess;
  UnpermuteBackwardKernel<<<Blocks(T * 32, 256), 256, 0, s>>>(
      T, H, K, reinterpret_cast<const uint4*>(dout), reinterpret_cast<const uint4*>(yp), topk_weight, perm_pos,
      reinterpret_cast<uint4*>(dyp), dtopk_weight);
  return cudaGetLastError();
}

cudaError_t LaunchSwiglu(int64_t rows, int32_t I, const __nv_bfloat16* gu, __nv_bfloat16* act, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  SwigluKernel<<<Blocks(rows * I, 256), 256, 0, s>>>(rows, I, gu, act);
  return cudaGetLastError();
}

cudaError_t LaunchSwigluBackward(int64_t rows, int32_t I, const __nv_bfloat16* gu, const __nv_bfloat16* dact,
                                 __nv_bfloat16* dgu, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  SwigluBackwardKernel<<<Blocks(rows * I, 256), 256, 0, s>>>(rows, I, gu, dact, dgu);
  return cudaGetLastError();
}

}  // namespace tandem::kernels::detail
