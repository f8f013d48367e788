// Tree attention backward in one pass (kTensorCoreFusedBwd and
// kTensorCoreFusedBwdOrdered; issue #4, docs/benchmarks.md "Round 3"). FlashAttention-2's backward layout on the
// tree plan: one block per (key tile, kv head) walks the transposed plan
// (the query tiles that see its keys) for every query head of its group and
//   S^T = K Q^T, dP^T = V dO^T, P^T = exp(S^T - lse), dS^T = P^T (dP^T - delta)
//   dV += P^T dO, dK += dS^T Q              (registers, as kTensorCore's DkvTC)
//   dQ += dS K                              (dS^T through smem, fp32 atomics)
// so the backward runs 5 tile GEMMs per (query tile, key tile) instead of the
// two-pass scheme's 7. dQ is accumulated in an fp32 workspace:
//  - kOrdered = false: float2 atomics (sm_90), then a kernel converts to bf16
//    (times scale); the summation order of dQ, and so its last bits, varies
//    from run to run (dK and dV stay deterministic).
//  - kOrdered = true (deterministic): the key tiles add into a query tile's
//    dQ one at a time in decreasing key-tile order, taking turns on a counter
//    per (query head, query tile) (FA3's deterministic mode). The first
//    stores, the others load-add-store, the last writes bf16 dQ directly.
//    Blocks are launched highest key tile first, so a block only ever waits
//    for blocks launched before it (no deadlock with in-order dispatch); a
//    block's wait is bounded (~4 s), after which it goes on and dQ is wrong
//    rather than the process hanging.
#include <algorithm>

#include "kernels/tree_attention/tree_attention_bwd_tiles.cuh"

namespace tandem::kernels::detail {

cudaError_t LaunchDelta(const TreeAttnArgs& a, cudaStream_t s);  // tree_attention_simple.cu

namespace {
using namespace tc;

constexpr int kLdS = kTile + 8;  // dS^T tile row stride (bf16), padded like the others

// A warp's 16 rows of dS^T (registers, C layout) to smem at `d` (row stride
// kLdS), in bf16: the precision the dQ MMA takes anyway.
__device__ __forceinline__ void StoreDsT(__nv_bfloat16* d, const float (&ds)[8][4], int lane) {
  __nv_bfloat16* d0 = d + (lane / 4) * kLdS + (lane % 4) * 2;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
    *reinterpret_cast<uint32_t*>(d0 + nt * 8) = PackBf16(ds[nt][0], ds[nt][1]);
    *reinterpret_cast<uint32_t*>(d0 + 8 * kLdS + nt * 8) = PackBf16(ds[nt][2], ds[nt][3]);
  }
}

__device__ __forceinline__ int LdAcquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

template <int D, bool kOrdered>
__global__ void __launch_bounds__(kThreads) BwdFusedTC(TreeAttnArgs a, float* dq_acc, int* sems) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  constexpr int kE = Smem<D>::kTileElems;
  constexpr int kLd = Smem<D>::kLd;
  __nv_bfloat16* ks = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* vs = ks + kE;
  __nv_bfloat16* qs = vs + kE;                            // 2 stages
  __nv_bfloat16* dos = qs + 2 * kE;                       // 2 stages
  __nv_bfloat16* dst = dos + 2 * kE;                      // dS^T [64 keys][kLdS]
  float* lse_s = reinterpret_cast<float*>(dst + kTile * kLdS);  // [2][64], log2 units
  float* delta_s = lse_s + 2 * kTile;                     // [2][64]
  const int kt = kOrdered ? a.num_tiles - 1 - static_cast<int>(blockIdx.x) : static_cast<int>(blockIdx.x);
  const int hk = blockIdx.y, G = a.Hq / a.Hkv;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int k0 = kt * kTile;
  const KeyRows krows(a, k0, warp, lane);
  const float sl2 = a.scale * kLog2e;
  const int tile_kend_min = a.tile_kend_min[kt];

  int h = hk * G;
  TileCursor cur(a.k_ptr, a.q_ranges, kt);
  auto load_item = [&](int hh, int tile, int st) {
    LoadQueryItem<D>(a, hh, tile, qs + st * kE, dos + st * kE, lse_s + st * kTile, delta_s + st * kTile);
  };
  LoadTileAsync<D>(ks, a.k, k0, a.T, a.Hkv, hk);
  LoadTileAsync<D>(vs, a.v, k0, a.T, a.Hkv, hk);
  if (cur.tile >= 0) load_item(h, cur.tile, 0);
  CpAsyncCommit();
  float dk[D / 8][4], dv[D / 8][4];
  ZeroKeyGrads<D>(dk, dv);
  int stage = 0;
  const int first_tile = cur.tile;
  while (cur.tile >= 0) {
    int next = cur.Next(), next_h = h;
    if (next < 0 && h + 1 < (hk + 1) * G) next = first_tile, next_h = h + 1;
    if (next >= 0) load_item(next_h, next, stage ^ 1);
    CpAsyncCommit();
    CpAsyncWait<1>();
    __syncthreads();
    const int q0 = cur.tile * kTile;
    {
      const bool full = k0 + kTile <= q0 && k0 + kTile <= a.T && tile_kend_min >= q0 + kTile;
      float ds[8][4];
      KeyTileGrads<D>(dk, dv, ds, ks + warp * 16 * kLd, vs + warp * 16 * kLd, qs + stage * kE, dos + stage * kE,
                      lse_s + stage * kTile, delta_s + stage * kTile, q0, full, krows, sl2, lane);
      StoreDsT(dst + warp * 16 * kLdS, ds, lane);
    }
    __syncthreads();
    // dQ rows [q0 + 16 warp, +16) += dS (16 x 64) K (64 x D), 32 columns at a
    // time to keep the accumulators small; A = dS read transposed from dS^T.
    const int qrow0 = q0 + warp * 16 + lane / 4, qrow1 = qrow0 + 8;
    const int64_t o0 = (static_cast<int64_t>(qrow0) * a.Hq + h) * D + (lane % 4) * 2;
    const int64_t o1 = (static_cast<int64_t>(qrow1) * a.Hq + h) * D + (lane % 4) * 2;
    int rank = 0, count = 1;
    if constexpr (kOrdered) {
      // Turn of this key tile among the key tiles of query tile cur.tile,
      // counted from the highest; wait for it.
      count = 0;
      for (int j = a.q_ptr[cur.tile]; j < a.q_ptr[cur.tile + 1]; ++j) {
        const int b = a.kv_ranges[2 * j], e = a.kv_ranges[2 * j + 1];
        count += e - b;
        rank += max(0, e - max(b, kt + 1));
      }
      if (threadIdx.x == 0 && rank > 0) {
        const int* sem = sems + static_cast<int64_t>(h) * a.num_tiles + cur.tile;
        for (int spins = 0; LdAcquire(sem) != rank && spins < (1 << 26); ++spins) __nanosleep(64);
      }
      __syncthreads();
    }
#pragma unroll
    for (int dc = 0; dc < D / 32; ++dc) {
      float acc[4][4];
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        uint32_t af[4];
        LdMatrixX4Trans(af, dst + (kk * 16 + (lane / 16) * 8 + lane % 8) * kLdS + warp * 16 + ((lane / 8) % 2) * 8);
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          uint32_t bf[4];
          LdMatrixX4Trans(bf, ks + (kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * kLd + (dc * 2 + j) * 16 +
                                  (lane / 16) * 8);
          Mma16816(acc[2 * j], af, bf[0], bf[1]);
          Mma16816(acc[2 * j + 1], af, bf[2], bf[3]);
        }
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int col = dc * 32 + i * 8;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          if ((r == 0 ? qrow0 : qrow1) >= a.T) continue;
          const int64_t o = (r == 0 ? o0 : o1) + col;
          float2 v = make_float2(acc[i][2 * r], acc[i][2 * r + 1]);
          if constexpr (!kOrdered) {
            atomicAdd(reinterpret_cast<float2*>(dq_acc + o), v);
          } else {
            if (rank > 0) {
              const float2 old = __ldcg(reinterpret_cast<const float2*>(dq_acc + o));
              v.x += old.x;
              v.y += old.y;
            }
            if (rank == count - 1) {
              *reinterpret_cast<__nv_bfloat162*>(a.dq + o) = __floats2bfloat162_rn(v.x * a.scale, v.y * a.scale);
            } else {
              __stcg(reinterpret_cast<float2*>(dq_acc + o), v);
            }
          }
        }
      }
    }
    if constexpr (kOrdered) __threadfence();
    __syncthreads();
    if constexpr (kOrdered) {
      if (threadIdx.x == 0 && rank < count - 1) atomicAdd(sems + static_cast<int64_t>(h) * a.num_tiles + cur.tile, 1);
    }
    if (cur.Next() < 0 && next >= 0) {
      cur = TileCursor(a.k_ptr, a.q_ranges, kt);
      h = next_h;
    } else {
      cur.Advance();
    }
    stage ^= 1;
  }
  StoreKeyGrads<D>(a, dk, dv, krows, hk, lane);
}

// kTensorCoreFusedBwdWide: the one-pass backward with 128 keys per block (two
// plan key tiles, 8 warps of 16 keys) over the union of the two tiles'
// query-tile lists (PairCursor). Each Q/dO tile loaded feeds twice the keys
// and each query row's dQ takes one atomic add per 128 keys instead of per
// 64 (half the atomic traffic). A warp whose key tile is not in the current
// query tile's list skips its GEMMs and leaves zeros in dS^T. dQ: warp w
// computes query rows 16 (w % 4) .. +16, columns (w / 4) D/2 .. +D/2.
constexpr int kWideThreads = 256;
constexpr int kWideKeys = 128;

// rows [r0, r0 + kRows) of head h of a [T, H, D] tensor into smem, 256 threads.
template <int D, int kRows>
__device__ __forceinline__ void LoadRows256(__nv_bfloat16* dst, const __nv_bfloat16* src, int r0, int T, int H,
                                            int h) {
  constexpr int kChunks = D / 8;
#pragma unroll
  for (int i = threadIdx.x; i < kRows * kChunks; i += kWideThreads) {
    const int r = i / kChunks, c = (i % kChunks) * 8;
    const bool valid = r0 + r < T;
    const __nv_bfloat16* g = valid ? src + (static_cast<int64_t>(r0 + r) * H + h) * D + c : src;
    CpAsync16(dst + r * Smem<D>::kLd + c, g, valid);
  }
}

template <int D>
__global__ void __launch_bounds__(kWideThreads) BwdFusedWideTC(TreeAttnArgs a, float* dq_acc) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  constexpr int kE = Smem<D>::kTileElems;  // one 64-row tile
  constexpr int kLd = Smem<D>::kLd;
  __nv_bfloat16* ks = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // 128 rows
  __nv_bfloat16* vs = ks + 2 * kE;                                  // 128 rows
  __nv_bfloat16* qs = vs + 2 * kE;                                  // 2 stages of 64 rows
  __nv_bfloat16* dos = qs + 2 * kE;                                 // 2 stages
  __nv_bfloat16* dst = dos + 2 * kE;                                // dS^T [128 keys][kLdS]
  float* lse_s = reinterpret_cast<float*>(dst + kWideKeys * kLdS);  // [2][64], log2 units
  float* delta_s = lse_s + 2 * kTile;                               // [2][64]
  const int kt0 = 2 * blockIdx.x, hk = blockIdx.y, G = a.Hq / a.Hkv;
  const bool has_second = kt0 + 1 < a.num_tiles;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int k0 = kt0 * kTile;
  const int ktw = kt0 + warp / 4;  // this warp's plan key tile
  const KeyRows krows(a, k0, warp, lane);
  const float sl2 = a.scale * kLog2e;
  const int tile_kend_min = ktw < a.num_tiles ? a.tile_kend_min[ktw] : 0;

  int h = hk * G;
  PairCursor cur(a.k_ptr, a.q_ranges, kt0, has_second);
  auto load_item = [&](int hh, int tile, int st) {
    LoadRows256<D, kTile>(qs + st * kE, a.q, tile * kTile, a.T, a.Hq, hh);
    LoadRows256<D, kTile>(dos + st * kE, a.dout, tile * kTile, a.T, a.Hq, hh);
    if (threadIdx.x < kTile) {
      const int q = tile * kTile + threadIdx.x;
      lse_s[st * kTile + threadIdx.x] = q < a.T ? a.lse_in[static_cast<int64_t>(hh) * a.T + q] * kLog2e : 0.f;
    } else if (threadIdx.x < 2 * kTile) {
      const int q = tile * kTile + threadIdx.x - kTile;
      delta_s[st * kTile + threadIdx.x - kTile] = q < a.T ? a.delta[static_cast<int64_t>(hh) * a.T + q] : 0.f;
    }
  };
  LoadRows256<D, kWideKeys>(ks, a.k, k0, a.T, a.Hkv, hk);
  LoadRows256<D, kWideKeys>(vs, a.v, k0, a.T, a.Hkv, hk);
  if (cur.tile >= 0) load_item(h, cur.tile, 0);
  CpAsyncCommit();
  float dk[D / 8][4], dv[D / 8][4];
  ZeroKeyGrads<D>(dk, dv);
  int stage = 0;
  const int first_tile = cur.tile;
  while (cur.tile >= 0) {
    int next = cur.Next(), next_h = h;
    if (next < 0 && h + 1 < (hk + 1) * G) next = first_tile, next_h = h + 1;
    if (next >= 0) load_item(next_h, next, stage ^ 1);
    CpAsyncCommit();
    CpAsyncWait<1>();
    __syncthreads();
    const int q0 = cur.tile * kTile;
    const bool in0 = cur.a.tile == cur.tile, in1 = cur.b.tile == cur.tile;  // block-uniform
    if (warp < 4 ? in0 : in1) {
      const bool full = (ktw + 1) * kTile <= q0 && (ktw + 1) * kTile <= a.T && tile_kend_min >= q0 + kTile;
      float ds[8][4];
      KeyTileGrads<D>(dk, dv, ds, ks + warp * 16 * kLd, vs + warp * 16 * kLd, qs + stage * kE, dos + stage * kE,
                      lse_s + stage * kTile, delta_s + stage * kTile, q0, full, krows, sl2, lane);
      StoreDsT(dst + warp * 16 * kLdS, ds, lane);
    }
    __syncthreads();
    // dQ (64 x D) += dS (64 x 128 keys) K (128 x D); skip a key half not in the list.
    const int qrow0 = q0 + (warp % 4) * 16 + lane / 4, qrow1 = qrow0 + 8;
    const int c0 = (warp / 4) * (D / 2);
    const int64_t o0 = (static_cast<int64_t>(qrow0) * a.Hq + h) * D + c0 + (lane % 4) * 2;
    const int64_t o1 = (static_cast<int64_t>(qrow1) * a.Hq + h) * D + c0 + (lane % 4) * 2;
    const int kk_begin = in0 ? 0 : 4, kk_end = in1 ? 8 : 4;
#pragma unroll
    for (int dc = 0; dc < D / 64; ++dc) {
      float acc[4][4];
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
      for (int kk = kk_begin; kk < kk_end; ++kk) {
        uint32_t af[4];
        LdMatrixX4Trans(af, dst + (kk * 16 + (lane / 16) * 8 + lane % 8) * kLdS + (warp % 4) * 16 +
                                ((lane / 8) % 2) * 8);
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          uint32_t bf[4];
          LdMatrixX4Trans(bf, ks + (kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * kLd + c0 + dc * 32 + j * 16 +
                                  (lane / 16) * 8);
          Mma16816(acc[2 * j], af, bf[0], bf[1]);
          Mma16816(acc[2 * j + 1], af, bf[2], bf[3]);
        }
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int col = dc * 32 + i * 8;
        if (qrow0 < a.T) atomicAdd(reinterpret_cast<float2*>(dq_acc + o0 + col), make_float2(acc[i][0], acc[i][1]));
        if (qrow1 < a.T) atomicAdd(reinterpret_cast<float2*>(dq_acc + o1 + col), make_float2(acc[i][2], acc[i][3]));
      }
    }
    __syncthreads();
    if (cur.Next() < 0 && next >= 0) {
      cur = PairCursor(a.k_ptr, a.q_ranges, kt0, has_second);
      h = next_h;
    } else {
      cur.Advance();
    }
    stage ^= 1;
  }
  StoreKeyGrads<D>(a, dk, dv, krows, hk, lane);
}

// dq = bf16(scale * dq_acc), 4 elements per thread (n is a multiple of 64).
__global__ void ConvertDq(const float* __restrict__ acc, __nv_bfloat16* __restrict__ dq, int64_t n4, float scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n4;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float4 v = reinterpret_cast<const float4*>(acc)[i];
    __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(dq) + 2 * i;
    o[0] = __floats2bfloat162_rn(v.x * scale, v.y * scale);
    o[1] = __floats2bfloat162_rn(v.z * scale, v.w * scale);
  }
}

// dq = bf16(scale * ws) over its n floats.
cudaError_t LaunchConvertDq(const TreeAttnArgs& a, const float* ws, int64_t n, cudaStream_t s) {
  const int64_t n4 = n / 4;
  const int blocks = static_cast<int>(std::min<int64_t>((n4 + 255) / 256, 132 * 16));
  ConvertDq<<<blocks, 256, 0, s>>>(ws, a.dq, n4, a.scale);
  return cudaGetLastError();
}

template <int D>
cudaError_t LaunchBackwardFusedWide(const TreeAttnArgs& a, float* ws, cudaStream_t s) {
  const int64_t n = static_cast<int64_t>(a.T) * a.Hq * D;
  cudaError_t e = cudaMemsetAsync(ws, 0, n * sizeof(float), s);
  if (e != cudaSuccess) return e;
  if ((e = LaunchDelta(a, s)) != cudaSuccess) return e;
  const int smem = 8 * Smem<D>::kTileElems * static_cast<int>(sizeof(__nv_bfloat16)) +
                   kWideKeys * kLdS * static_cast<int>(sizeof(__nv_bfloat16)) +
                   4 * kTile * static_cast<int>(sizeof(float));
  if ((e = cudaFuncSetAttribute(BwdFusedWideTC<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem)) !=
      cudaSuccess) {
    return e;
  }
  BwdFusedWideTC<D><<<dim3((a.num_tiles + 1) / 2, a.Hkv), kWideThreads, smem, s>>>(a, ws);
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  return LaunchConvertDq(a, ws, n, s);
}

template <int D, bool kOrdered>
cudaError_t LaunchBackwardFused(const TreeAttnArgs& a, float* ws, cudaStream_t s) {
  const int64_t n = static_cast<int64_t>(a.T) * a.Hq * D;
  int* sems = reinterpret_cast<int*>(ws + n);  // [Hq][num_tiles], ordered mode only
  cudaError_t e = kOrdered ? cudaMemsetAsync(sems, 0, static_cast<size_t>(a.Hq) * a.num_tiles * sizeof(int), s)
                           : cudaMemsetAsync(ws, 0, n * sizeof(float), s);
  if (e != cudaSuccess) return e;
  if ((e = LaunchDelta(a, s)) != cudaSuccess) return e;
  const int smem = 6 * Smem<D>::kTileElems * static_cast<int>(sizeof(__nv_bfloat16)) +
                   kTile * kLdS * static_cast<int>(sizeof(__nv_bfloat16)) + 4 * kTile * static_cast<int>(sizeof(float));
  auto* kernel = BwdFusedTC<D, kOrdered>;
  if ((e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem)) != cudaSuccess) return e;
  kernel<<<dim3(a.num_tiles, a.Hkv), kThreads, smem, s>>>(a, ws, sems);
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  if (kOrdered) return cudaSuccess;
  return LaunchConvertDq(a, ws, n, s);
}

}  // namespace

cudaError_t LaunchBackwardTensorCoreFusedWide(const TreeAttnArgs& a, float* ws, cudaStream_t s) {
  if (a.D == 128) return LaunchBackwardFusedWide<128>(a, ws, s);
#ifndef TANDEM_CUDA_CI_SUBSET
  if (a.D == 64) return LaunchBackwardFusedWide<64>(a, ws, s);
#endif
  return cudaErrorInvalidValue;
}

cudaError_t LaunchBackwardTensorCoreFused(const TreeAttnArgs& a, float* ws, bool ordered, cudaStream_t s) {
  if (a.D == 128) return ordered ? LaunchBackwardFused<128, true>(a, ws, s) : LaunchBackwardFused<128, false>(a, ws, s);
#ifndef TANDEM_CUDA_CI_SUBSET
  if (a.D == 64) return ordered ? LaunchBackwardFused<64, true>(a, ws, s) : LaunchBackwardFused<64, false>(a, ws, s);
#endif
  return cudaErrorInvalidValue;
}

}  // namespace tandem::kernels::detail
