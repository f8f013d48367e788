// Tree attention, first correct CUDA version (kSimple): fp32 CUDA cores, one
// block of 128 threads per (64-token tile, head), tiles staged in shared memory
// as fp32. Kept as the baseline of the benchmark and as a second opinion in
// the GPU tests. Mask: key k visible to query q iff k <= q < kend[k].
#include "kernels/tree_attention/tree_attention_launch.h"

namespace tandem::kernels::detail {
namespace {

constexpr int kTile = 64;
constexpr int kThreads = 128;  // two threads per tile row

__device__ inline bool Visible(const int32_t* kend, int T, int q, int k) {
  return q < T && k < T && k <= q && q < kend[k];
}

// Loads rows [r0, r0+64) of a [T, H, D] bf16 tensor (head h) as fp32; rows
// past T are zero.
__device__ inline void LoadTile(float* dst, const __nv_bfloat16* src, int r0, int T, int H, int h, int D) {
  for (int i = threadIdx.x; i < kTile * D; i += kThreads) {
    const int r = i / D, c = i % D;
    dst[i] = (r0 + r < T) ? __bfloat162float(src[(static_cast<int64_t>(r0 + r) * H + h) * D + c]) : 0.f;
  }
}

__global__ void ForwardKernel(TreeAttnArgs a) {
  extern __shared__ float smem[];
  const int D = a.D;
  float* qs = smem;               // [64][D]
  float* ks = qs + kTile * D;     // [64][D]
  float* vs = ks + kTile * D;     // [64][D]
  float* ss = vs + kTile * D;     // [64][65]
  const int qt = blockIdx.x, h = blockIdx.y, hk = h / (a.Hq / a.Hkv);
  const int row = threadIdx.x / 2, half = threadIdx.x % 2;
  const int q = qt * kTile + row;
  LoadTile(qs, a.q, qt * kTile, a.T, a.Hq, h, D);
  float acc[64];  // this thread's half of the output row (D/2 <= 64)
  for (int x = 0; x < 64; ++x) acc[x] = 0.f;
  float m = -INFINITY, l = 0.f;
  for (int j = a.q_ptr[qt]; j < a.q_ptr[qt + 1]; ++j) {
    for (int kt = a.kv_ranges[2 * j]; kt < a.kv_ranges[2 * j + 1]; ++kt) {
      __syncthreads();
      LoadTile(ks, a.k, kt * kTile, a.T, a.Hkv, hk, D);
      LoadTile(vs, a.v, kt * kTile, a.T, a.Hkv, hk, D);
      __syncthreads();
      for (int c = half * 32; c < half * 32 + 32; ++c) {
        const int k = kt * kTile + c;
        float s = -INFINITY;
        if (Visible(a.kend, a.T, q, k)) {
          s = 0.f;
          for (int x = 0; x < D; ++x) s += qs[row * D + x] * ks[c * D + x];
          s *= a.scale;
        }
        ss[row * 65 + c] = s;
      }
      __syncthreads();
      float mt = -INFINITY;
      for (int c = 0; c < kTile; ++c) mt = fmaxf(mt, ss[row * 65 + c]);
      if (mt == -INFINITY) continue;
      const float mn = fmaxf(m, mt), corr = __expf(m - mn);
      l *= corr;
      for (int x = 0; x < D / 2; ++x) acc[x] *= corr;
      for (int c = 0; c < kTile; ++c) {
        const float s = ss[row * 65 + c];
        if (s == -INFINITY) continue;
        const float p = __expf(s - mn);
        l += p;
        for (int x = 0; x < D / 2; ++x) acc[x] += p * vs[c * D + half * (D / 2) + x];
      }
      m = mn;
    }
  }
  if (q < a.T) {
    for (int x = 0; x < D / 2; ++x) {
      a.o[(static_cast<int64_t>(q) * a.Hq + h) * D + half * (D / 2) + x] = __float2bfloat16(acc[x] / l);
    }
    if (half == 0) a.lse[static_cast<int64_t>(h) * a.T + q] = m + logf(l);
  }
}

// delta[h][t] = dout[t,h,:] . out[t,h,:], one warp per (t, h).
__global__ void DeltaKernel(TreeAttnArgs a) {
  const int64_t w = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (w >= static_cast<int64_t>(a.T) * a.Hq) return;
  const int64_t t = w / a.Hq, h = w % a.Hq;
  float s = 0.f;
  for (int x = lane; x < a.D; x += 32) {
    const int64_t i = (t * a.Hq + h) * a.D + x;
    s += __bfloat162float(a.dout[i]) * __bfloat162float(a.out[i]);
  }
  for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) a.delta[h * a.T + t] = s;
}

// dQ: per (query tile, head). ds = p * (dout.v - delta) * scale; dq += ds k.
__global__ void DqKernel(TreeAttnArgs a) {
  extern __shared__ float smem[];
  const int D = a.D;
  float* qs = smem;
  float* dos = qs + kTile * D;
  float* ks = dos + kTile * D;
  float* vs = ks + kTile * D;
  float* ss = vs + kTile * D;  // dS [64][65]
  const int qt = blockIdx.x, h = blockIdx.y, hk = h / (a.Hq / a.Hkv);
  const int row = threadIdx.x / 2, half = threadIdx.x % 2;
  const int q = qt * kTile + row;
  LoadTile(qs, a.q, qt * kTile, a.T, a.Hq, h, D);
  LoadTile(dos, a.dout, qt * kTile, a.T, a.Hq, h, D);
  const float lse = q < a.T ? a.lse_in[static_cast<int64_t>(h) * a.T + q] : 0.f;
  const float delta = q < a.T ? a.delta[static_cast<int64_t>(h) * a.T + q] : 0.f;
  float acc[64];
  for (int x = 0; x < 64; ++x) acc[x] = 0.f;
  for (int j = a.q_ptr[qt]; j < a.q_ptr[qt + 1]; ++j) {
    for (int kt = a.kv_ranges[2 * j]; kt < a.kv_ranges[2 * j + 1]; ++kt) {
      __syncthreads();
      LoadTile(ks, a.k, kt * kTile, a.T, a.Hkv, hk, D);
      LoadTile(vs, a.v, kt * kTile, a.T, a.Hkv, hk, D);
      __syncthreads();
      for (int c = half * 32; c < half * 32 + 32; ++c) {
        float ds = 0.f;
        if (Visible(a.kend, a.T, q, kt * kTile + c)) {
          float s = 0.f, dp = 0.f;
          for (int x = 0; x < D; ++x) {
            s += qs[row * D + x] * ks[c * D + x];
            dp += dos[row * D + x] * vs[c * D + x];
          }
          ds = __expf(s * a.scale - lse) * (dp - delta) * a.scale;
        }
        ss[row * 65 + c] = ds;
      }
      __syncthreads();
      for (int c = 0; c < kTile; ++c) {
        const float ds = ss[row * 65 + c];
        for (int x = 0; x < D / 2; ++x) acc[x] += ds * ks[c * D + half * (D / 2) + x];
      }
    }
  }
  if (q < a.T) {
    for (int x = 0; x < D / 2; ++x) a.dq[(static_cast<int64_t>(q) * a.Hq + h) * D + half * (D / 2) + x] = __float2bfloat16(acc[x]);
  }
}

// dK, dV: per (key tile, kv head), over the query tiles of the transposed
// plan and the query heads of the group. Accumulates in registers.
__global__ void DkvKernel(TreeAttnArgs a) {
  extern __shared__ float smem[];
  const int D = a.D;
  float* ks = smem;
  float* vs = ks + kTile * D;
  float* qs = vs + kTile * D;
  float* dos = qs + kTile * D;
  float* ps = dos + kTile * D;      // P^T [64 keys][65]
  float* dss = ps + kTile * 65;     // dS^T [64 keys][65]
  float* lse_s = dss + kTile * 65;  // [64]
  float* delta_s = lse_s + kTile;   // [64]
  const int kt = blockIdx.x, hk = blockIdx.y, G = a.Hq / a.Hkv;
  const int row = threadIdx.x / 2, half = threadIdx.x % 2;
  const int k = kt * kTile + row;
  LoadTile(ks, a.k, kt * kTile, a.T, a.Hkv, hk, D);
  LoadTile(vs, a.v, kt * kTile, a.T, a.Hkv, hk, D);
  float dk[64], dv[64];
  for (int x = 0; x < 64; ++x) dk[x] = dv[x] = 0.f;
  for (int h = hk * G; h < (hk + 1) * G; ++h) {
    for (int j = a.k_ptr[kt]; j < a.k_ptr[kt + 1]; ++j) {
      for (int qt = a.q_ranges[2 * j]; qt < a.q_ranges[2 * j + 1]; ++qt) {
        __syncthreads();
        LoadTile(qs, a.q, qt * kTile, a.T, a.Hq, h, D);
        LoadTile(dos, a.dout, qt * kTile, a.T, a.Hq, h, D);
        if (threadIdx.x < kTile) {
          const int qq = qt * kTile + threadIdx.x;
          lse_s[threadIdx.x] = qq < a.T ? a.lse_in[static_cast<int64_t>(h) * a.T + qq] : 0.f;
          delta_s[threadIdx.x] = qq < a.T ? a.delta[static_cast<int64_t>(h) * a.T + qq] : 0.f;
        }
        __syncthreads();
        for (int c = half * 32; c < half * 32 + 32; ++c) {
          float p = 0.f, ds = 0.f;
          if (Visible(a.kend, a.T, qt * kTile + c, k)) {
            float s = 0.f, dp = 0.f;
            for (int x = 0; x < D; ++x) {
              s += qs[c * D + x] * ks[row * D + x];
              dp += dos[c * D + x] * vs[row * D + x];
            }
            p = __expf(s * a.scale - lse_s[c]);
            ds = p * (dp - delta_s[c]) * a.scale;
          }
          ps[row * 65 + c] = p;
          dss[row * 65 + c] = ds;
        }
        __syncthreads();
        for (int c = 0; c < kTile; ++c) {
          const float p = ps[row * 65 + c], ds = dss[row * 65 + c];
          for (int x = 0; x < D / 2; ++x) {
            dv[x] += p * dos[c * D + half * (D / 2) + x];
            dk[x] += ds * qs[c * D + half * (D / 2) + x];
          }
        }
      }
    }
  }
  if (k < a.T) {
    for (int x = 0; x < D / 2; ++x) {
      const int64_t i = (static_cast<int64_t>(k) * a.Hkv + hk) * D + half * (D / 2) + x;
      a.dk[i] = __float2bfloat16(dk[x]);
      a.dv[i] = __float2bfloat16(dv[x]);
    }
  }
}

}  // namespace

cudaError_t LaunchForwardSimple(const TreeAttnArgs& a, cudaStream_t s) {
  const size_t smem = sizeof(float) * (3 * kTile * a.D + kTile * 65);
  cudaError_t e = cudaFuncSetAttribute(ForwardKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  ForwardKernel<<<dim3(a.num_tiles, a.Hq), kThreads, smem, s>>>(a);
  return cudaGetLastError();
}

cudaError_t LaunchDelta(const TreeAttnArgs& a, cudaStream_t s) {
  const int64_t warps = static_cast<int64_t>(a.T) * a.Hq;
  if (warps == 0) return cudaSuccess;
  DeltaKernel<<<static_cast<unsigned>((warps * 32 + 255) / 256), 256, 0, s>>>(a);
  return cudaGetLastError();
}

cudaError_t LaunchBackwardSimple(const TreeAttnArgs& a, cudaStream_t s) {
  cudaError_t e = LaunchDelta(a, s);
  if (e != cudaSuccess) return e;
  const size_t smem_q = sizeof(float) * (4 * kTile * a.D + kTile * 65);
  e = cudaFuncSetAttribute(DqKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_q));
  if (e != cudaSuccess) return e;
  DqKernel<<<dim3(a.num_tiles, a.Hq), kThreads, smem_q, s>>>(a);
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  const size_t smem_kv = sizeof(float) * (4 * kTile * a.D + 2 * kTile * 65 + 2 * kTile);
  e = cudaFuncSetAttribute(DkvKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_kv));
  if (e != cudaSuccess) return e;
  DkvKernel<<<dim3(a.num_tiles, a.Hkv), kThreads, smem_kv, s>>>(a);
  return cudaGetLastError();
}

}  // namespace tandem::kernels::detail
