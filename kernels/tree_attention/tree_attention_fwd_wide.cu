// Tree attention forward, 128-row variant (kTensorCoreWide): each block takes
// two 64-row query tiles of the plan and visits the union of their key-tile
// lists; 4 warps each own 32 query rows (two m16 tiles), so every K/V
// fragment read by ldmatrix feeds two mma.sync instead of one (half the
// shared-memory reads per MMA of kTensorCore). K and V are double-buffered
// through cp.async. A warp skips a key tile that lies wholly above its rows
// (the second plan tile's diagonal for warps 0-1), and skips the mask on
// tiles wholly visible to its rows. Mask, softmax and plan as in
// tree_attention.cu (forest.h: visible iff k <= q < kend[k]).
//
// kLazy (kTensorCoreWideLazy): the running max of a row moves only when the
// tile's max exceeds it by more than kLazyLog2 (log2 units), so most tiles skip
// rescaling the 32 x D accumulators (a fifth of the loop's instructions);
// P = exp2(s - m) then stays below 2^kLazyLog2 (fine in fp32 l and bf16 P),
// and o / l and lse = m + log2(l) are exact for any m used consistently.
#include <cfloat>

#include "kernels/tree_attention/tree_attention_tiles.cuh"

namespace tandem::kernels::detail {
namespace {

using namespace tc;

constexpr int kRowsPerWarp = 32;  // 4 warps: 128 rows, two plan tiles

// S (32 x 64 per warp, two m16 tiles) = Q rows (32 x D at `qw`) * K rows^T (64 x D at `kt`).
template <int D>
__device__ __forceinline__ void GemmS2(float (&s)[2][8][4], const __nv_bfloat16* qw, const __nv_bfloat16* kt,
                                       int lane) {
  constexpr int kLd = Smem<D>::kLd;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) s[mi][nt][0] = s[mi][nt][1] = s[mi][nt][2] = s[mi][nt][3] = 0.f;
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    uint32_t af[2][4];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
      LdMatrixX4(af[mi], qw + (mi * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * kLd + ks * 16 + (lane / 16) * 8);
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      uint32_t bf[4];
      LdMatrixX4(bf, kt + (np * 16 + (lane % 8) + (lane / 16) * 8) * kLd + ks * 16 + ((lane / 8) % 2) * 8);
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        Mma16816(s[mi][2 * np], af[mi], bf[0], bf[1]);
        Mma16816(s[mi][2 * np + 1], af[mi], bf[2], bf[3]);
      }
    }
  }
}

// acc (32 x D per warp) += P (32 x 64, packed bf16 A fragments) * V rows (64 x D at `vt`).
template <int D>
__device__ __forceinline__ void GemmPV2(float (&acc)[2][D / 8][4], const uint32_t (&p)[2][4][4],
                                        const __nv_bfloat16* vt, int lane) {
  constexpr int kLd = Smem<D>::kLd;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t bf[4];
      LdMatrixX4Trans(bf, vt + (kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * kLd + dp * 16 + (lane / 16) * 8);
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        Mma16816(acc[mi][2 * dp], p[mi][kk], bf[0], bf[1]);
        Mma16816(acc[mi][2 * dp + 1], p[mi][kk], bf[2], bf[3]);
      }
    }
  }
}

constexpr float kLazyLog2 = 8.f;

template <int D, bool kLazy>
__global__ void __launch_bounds__(kThreads, 2) ForwardWide(TreeAttnArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  constexpr int kE = Smem<D>::kTileElems;
  constexpr int kLd = Smem<D>::kLd;
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // 128 rows
  __nv_bfloat16* ks = qs + 2 * kE;                                  // 2 stages
  __nv_bfloat16* vs = ks + 2 * kE;                                  // 2 stages
  const int h = blockIdx.y, hk = h / (a.Hq / a.Hkv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int pt = 2 * blockIdx.x;  // first plan tile
  const int q0 = pt * kTile;
  const int wq0 = q0 + warp * kRowsPerWarp;  // this warp's first row
  const float sl2 = a.scale * kLog2e;

  PairCursor cur(a.q_ptr, a.kv_ranges, pt, pt + 1 < a.num_tiles);
  LoadTileAsync<D>(qs, a.q, q0, a.T, a.Hq, h);
  LoadTileAsync<D>(qs + kE, a.q, q0 + kTile, a.T, a.Hq, h);
  if (cur.tile >= 0) {
    LoadTileAsync<D>(ks, a.k, cur.tile * kTile, a.T, a.Hkv, hk);
    LoadTileAsync<D>(vs, a.v, cur.tile * kTile, a.T, a.Hkv, hk);
  }
  CpAsyncCommit();

  float o[2][D / 8][4];
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[mi][i][0] = o[mi][i][1] = o[mi][i][2] = o[mi][i][3] = 0.f;
  // m, l per (m tile, row half): index 2*mi + (row + 8)
  float m[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY}, l[4] = {0.f, 0.f, 0.f, 0.f};
  int stage = 0;
  while (cur.tile >= 0) {
    const int next = cur.Next();
    if (next >= 0) {
      LoadTileAsync<D>(ks + (stage ^ 1) * kE, a.k, next * kTile, a.T, a.Hkv, hk);
      LoadTileAsync<D>(vs + (stage ^ 1) * kE, a.v, next * kTile, a.T, a.Hkv, hk);
    }
    CpAsyncCommit();
    CpAsyncWait<1>();
    __syncthreads();

    const int k0 = cur.tile * kTile;
    // Warp-uniform: a tile whose first key lies past this warp's last row is
    // invisible to all of its rows.
    if (k0 <= wq0 + kRowsPerWarp - 1) {
      float s[2][8][4];
      GemmS2<D>(s, qs + warp * kRowsPerWarp * kLd, ks + stage * kE, lane);
      const bool full = k0 + kTile - 1 <= wq0 && k0 + kTile <= a.T &&
                        __ldg(a.tile_kend_min + cur.tile) >= wq0 + kRowsPerWarp;
      if (!full) {
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          const int r0 = wq0 + mi * 16 + lane / 4;
#pragma unroll
          for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int col = k0 + nt * 8 + (lane % 4) * 2 + (e & 1);
              const int row = e < 2 ? r0 : r0 + 8;
              const int kend = col < a.T ? __ldg(a.kend + col) : 0;
              if (!(col <= row && row < kend)) s[mi][nt][e] = -INFINITY;
            }
          }
        }
      }
      uint32_t p[2][4][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          mx0 = fmaxf(mx0, fmaxf(s[mi][nt][0], s[mi][nt][1]));
          mx1 = fmaxf(mx1, fmaxf(s[mi][nt][2], s[mi][nt][3]));
        }
#pragma unroll
        for (int off = 1; off <= 2; off *= 2) {
          mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
          mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
        }
        float mn0 = fmaxf(m[2 * mi], mx0 * sl2), mn1 = fmaxf(m[2 * mi + 1], mx1 * sl2);
        bool rescale = true;
        if (kLazy) {
          // Keep the old max unless the new one is more than kLazyLog2 above it
          // (-inf to finite always moves; NaN compares false only for -inf - -inf).
          if (!(mn0 - m[2 * mi] > kLazyLog2)) mn0 = m[2 * mi];
          if (!(mn1 - m[2 * mi + 1] > kLazyLog2)) mn1 = m[2 * mi + 1];
          rescale = __any_sync(0xffffffffu, mn0 != m[2 * mi] || mn1 != m[2 * mi + 1]);
        }
        const float mu0 = mn0 == -INFINITY ? 0.f : mn0, mu1 = mn1 == -INFINITY ? 0.f : mn1;
        float l0 = l[2 * mi], l1 = l[2 * mi + 1];
        if (rescale) {
          const float c0 = exp2f(m[2 * mi] - mu0), c1 = exp2f(m[2 * mi + 1] - mu1);
          l0 *= c0;
          l1 *= c1;
#pragma unroll
          for (int i = 0; i < D / 8; ++i) {
            o[mi][i][0] *= c0;
            o[mi][i][1] *= c0;
            o[mi][i][2] *= c1;
            o[mi][i][3] *= c1;
          }
        }
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          s[mi][nt][0] = exp2f(fmaf(s[mi][nt][0], sl2, -mu0));
          s[mi][nt][1] = exp2f(fmaf(s[mi][nt][1], sl2, -mu0));
          s[mi][nt][2] = exp2f(fmaf(s[mi][nt][2], sl2, -mu1));
          s[mi][nt][3] = exp2f(fmaf(s[mi][nt][3], sl2, -mu1));
          l0 += s[mi][nt][0] + s[mi][nt][1];
          l1 += s[mi][nt][2] + s[mi][nt][3];
        }
        l[2 * mi] = l0;
        l[2 * mi + 1] = l1;
        m[2 * mi] = mn0;
        m[2 * mi + 1] = mn1;
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          p[mi][kk][0] = PackBf16(s[mi][2 * kk][0], s[mi][2 * kk][1]);
          p[mi][kk][1] = PackBf16(s[mi][2 * kk][2], s[mi][2 * kk][3]);
          p[mi][kk][2] = PackBf16(s[mi][2 * kk + 1][0], s[mi][2 * kk + 1][1]);
          p[mi][kk][3] = PackBf16(s[mi][2 * kk + 1][2], s[mi][2 * kk + 1][3]);
        }
      }
      GemmPV2<D>(o, p, vs + stage * kE, lane);
    }
    __syncthreads();
    cur.Advance();
    stage ^= 1;
  }
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
    float l0 = l[2 * mi], l1 = l[2 * mi + 1];
#pragma unroll
    for (int off = 1; off <= 2; off *= 2) {
      l0 += __shfl_xor_sync(0xffffffffu, l0, off);
      l1 += __shfl_xor_sync(0xffffffffu, l1, off);
    }
    const int row0 = wq0 + mi * 16 + lane / 4, row1 = row0 + 8;
    const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      const int col = i * 8 + (lane % 4) * 2;
      if (row0 < a.T) {
        *reinterpret_cast<__nv_bfloat162*>(a.o + (static_cast<int64_t>(row0) * a.Hq + h) * D + col) =
            __floats2bfloat162_rn(o[mi][i][0] * inv0, o[mi][i][1] * inv0);
      }
      if (row1 < a.T) {
        *reinterpret_cast<__nv_bfloat162*>(a.o + (static_cast<int64_t>(row1) * a.Hq + h) * D + col) =
            __floats2bfloat162_rn(o[mi][i][2] * inv1, o[mi][i][3] * inv1);
      }
    }
    if (lane % 4 == 0) {
      constexpr float kLn2 = 0.6931471805599453f;
      if (row0 < a.T) a.lse[static_cast<int64_t>(h) * a.T + row0] = (m[2 * mi] + log2f(l0)) * kLn2;
      if (row1 < a.T) a.lse[static_cast<int64_t>(h) * a.T + row1] = (m[2 * mi + 1] + log2f(l1)) * kLn2;
    }
  }
}

template <int D, bool kLazy>
cudaError_t LaunchWide(const TreeAttnArgs& a, cudaStream_t s) {
  const int smem = 6 * Smem<D>::kTileElems * static_cast<int>(sizeof(__nv_bfloat16));
  cudaError_t e = cudaFuncSetAttribute(ForwardWide<D, kLazy>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  ForwardWide<D, kLazy><<<dim3((a.num_tiles + 1) / 2, a.Hq), kThreads, smem, s>>>(a);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchForwardTensorCoreWide(const TreeAttnArgs& a, cudaStream_t s) {
  if (a.D == 128) return LaunchWide<128, false>(a, s);
#ifndef TANDEM_CUDA_CI_SUBSET
  if (a.D == 64) return LaunchWide<64, false>(a, s);
#endif
  return cudaErrorInvalidValue;
}

cudaError_t LaunchForwardTensorCoreWideLazy(const TreeAttnArgs& a, cudaStream_t s) {
  if (a.D == 128) return LaunchWide<128, true>(a, s);
#ifndef TANDEM_CUDA_CI_SUBSET
  if (a.D == 64) return LaunchWide<64, true>(a, s);
#endif
  return cudaErrorInvalidValue;
}

}  // namespace tandem::kernels::detail
