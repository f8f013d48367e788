// Tree attention, tensor-core CUDA version (kTensorCore): FlashAttention-2
// style tiles on mma.sync bf16 (fp32 accumulators), 4 warps x 16 rows, 64-key
// tiles double-buffered through cp.async. The key tiles a query tile visits
// come from the plan (forest.h); inside a tile the mask is k <= q < kend[k].
// Backward in two deterministic passes (dQ per query tile; dK/dV per key tile
// over the transposed plan and the group's query heads), after delta =
// rowsum(dout * out).
#include <cfloat>

#include "kernels/tree_attention/tree_attention_tiles.cuh"

namespace tandem::kernels::detail {


namespace {

using namespace tc;

// kOverlapV: V gets one smem stage instead of two (4 tiles of smem instead
// of 5, so 3 blocks per SM at d=128 instead of 2); the load of V for the next
// tile is issued after this tile's P.V and overlaps the next S = Q.K^T and
// softmax, while K stays double-buffered.
template <int D, bool kOverlapV>
__global__ void __launch_bounds__(kThreads) ForwardTC(TreeAttnArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  constexpr int kE = Smem<D>::kTileElems;
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* ks = qs + kE;      // 2 stages
  __nv_bfloat16* vs = ks + 2 * kE;  // 1 or 2 stages
  const int qt = blockIdx.x, h = blockIdx.y, hk = h / (a.Hq / a.Hkv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = qt * kTile;
  const int row0 = q0 + warp * 16 + lane / 4, row1 = row0 + 8;
  const float sl2 = a.scale * kLog2e;

  TileCursor cur(a.q_ptr, a.kv_ranges, qt);
  LoadTileAsync<D>(qs, a.q, q0, a.T, a.Hq, h);
  if (cur.tile >= 0) LoadTileAsync<D>(ks, a.k, cur.tile * kTile, a.T, a.Hkv, hk);
  if (kOverlapV) CpAsyncCommit();  // group: Q + K0, then group: V0
  if (cur.tile >= 0) LoadTileAsync<D>(vs, a.v, cur.tile * kTile, a.T, a.Hkv, hk);
  CpAsyncCommit();

  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
  int stage = 0;
  while (cur.tile >= 0) {
    const int next = cur.Next();
    if (kOverlapV) {
      CpAsyncWait<1>();  // pending were [K_i, V_i]: K_i has landed
      __syncthreads();
      if (next >= 0) LoadTileAsync<D>(ks + (stage ^ 1) * kE, a.k, next * kTile, a.T, a.Hkv, hk);
      CpAsyncCommit();
    } else {
      if (next >= 0) {
        LoadTileAsync<D>(ks + (stage ^ 1) * kE, a.k, next * kTile, a.T, a.Hkv, hk);
        LoadTileAsync<D>(vs + (stage ^ 1) * kE, a.v, next * kTile, a.T, a.Hkv, hk);
      }
      CpAsyncCommit();
      CpAsyncWait<1>();
      __syncthreads();
    }

    float s[8][4];
    GemmRowsRowsT<D>(s, qs + warp * 16 * Smem<D>::kLd, ks + stage * kE, lane);
    const int k0 = cur.tile * kTile;
    // Tiles wholly visible to the whole query tile skip the per-element mask.
    const bool full = k0 + kTile <= q0 && k0 + kTile <= a.T && __ldg(a.tile_kend_min + cur.tile) >= q0 + kTile;
    if (!full) {
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = k0 + nt * 8 + (lane % 4) * 2 + (e & 1);
          const int row = e < 2 ? row0 : row1;
          const int kend = col < a.T ? __ldg(a.kend + col) : 0;
          if (!(col <= row && row < kend)) s[nt][e] = -INFINITY;
        }
      }
    }
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      mx0 = fmaxf(mx0, fmaxf(s[nt][0], s[nt][1]));
      mx1 = fmaxf(mx1, fmaxf(s[nt][2], s[nt][3]));
    }
#pragma unroll
    for (int off = 1; off <= 2; off *= 2) {
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
    }
    // Running max m in log2 units of the scaled scores.
    const float mn0 = fmaxf(m0, mx0 * sl2), mn1 = fmaxf(m1, mx1 * sl2);
    const float mu0 = mn0 == -INFINITY ? 0.f : mn0, mu1 = mn1 == -INFINITY ? 0.f : mn1;
    const float c0 = exp2f(m0 - mu0), c1 = exp2f(m1 - mu1);
    l0 *= c0;
    l1 *= c1;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      s[nt][0] = exp2f(fmaf(s[nt][0], sl2, -mu0));
      s[nt][1] = exp2f(fmaf(s[nt][1], sl2, -mu0));
      s[nt][2] = exp2f(fmaf(s[nt][2], sl2, -mu1));
      s[nt][3] = exp2f(fmaf(s[nt][3], sl2, -mu1));
      l0 += s[nt][0] + s[nt][1];
      l1 += s[nt][2] + s[nt][3];
    }
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      o[i][0] *= c0;
      o[i][1] *= c0;
      o[i][2] *= c1;
      o[i][3] *= c1;
    }
    m0 = mn0;
    m1 = mn1;
    if (kOverlapV) {
      CpAsyncWait<1>();  // pending were [V_i, K_next]: V_i has landed
      __syncthreads();
    }
    GemmRegsRows<D>(o, s, vs + (kOverlapV ? 0 : stage * kE), lane);
    __syncthreads();
    if (kOverlapV) {
      if (next >= 0) LoadTileAsync<D>(vs, a.v, next * kTile, a.T, a.Hkv, hk);
      CpAsyncCommit();
    }
    cur.Advance();
    stage ^= 1;
  }
#pragma unroll
  for (int off = 1; off <= 2; off *= 2) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, off);
    l1 += __shfl_xor_sync(0xffffffffu, l1, off);
  }
  const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
#pragma unroll
  for (int i = 0; i < D / 8; ++i) {
    const int col = i * 8 + (lane % 4) * 2;
    if (row0 < a.T) {
      *reinterpret_cast<__nv_bfloat162*>(a.o + (static_cast<int64_t>(row0) * a.Hq + h) * D + col) =
          __floats2bfloat162_rn(o[i][0] * inv0, o[i][1] * inv0);
    }
    if (row1 < a.T) {
      *reinterpret_cast<__nv_bfloat162*>(a.o + (static_cast<int64_t>(row1) * a.Hq + h) * D + col) =
          __floats2bfloat162_rn(o[i][2] * inv1, o[i][3] * inv1);
    }
  }
  if (lane % 4 == 0) {
    constexpr float kLn2 = 0.6931471805599453f;
    if (row0 < a.T) a.lse[static_cast<int64_t>(h) * a.T + row0] = (m0 + log2f(l0)) * kLn2;
    if (row1 < a.T) a.lse[static_cast<int64_t>(h) * a.T + row1] = (m1 + log2f(l1)) * kLn2;
  }
}

}  // namespace

template <int D, bool kOverlapV>
static cudaError_t LaunchForwardTC(const TreeAttnArgs& a, cudaStream_t s) {
  const int smem = (kOverlapV ? 4 : 5) * Smem<D>::kTileElems * static_cast<int>(sizeof(__nv_bfloat16));
  cudaError_t e = cudaFuncSetAttribute(ForwardTC<D, kOverlapV>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  ForwardTC<D, kOverlapV><<<dim3(a.num_tiles, a.Hq), kThreads, smem, s>>>(a);
  return cudaGetLastError();
}

cudaError_t LaunchForwardTensorCore(const TreeAttnArgs& a, cudaStream_t s) {
  if (a.D == 128) return LaunchForwardTC<128, false>(a, s);
#ifndef TANDEM_CUDA_CI_SUBSET
  if (a.D == 64) return LaunchForwardTC<64, false>(a, s);
#endif
  return cudaErrorInvalidValue;
}

cudaError_t LaunchForwardTensorCoreOverlapV(const TreeAttnArgs& a, cudaStream_t s) {
  if (a.D == 128) return LaunchForwardTC<128, true>(a, s);
#ifndef TANDEM_CUDA_CI_SUBSET
  if (a.D == 64) return LaunchForwardTC<64, true>(a, s);
#endif
  return cudaErrorInvalidValue;
}

}  // namespace tandem::kernels::detail
