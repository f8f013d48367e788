// Tree attention backward, tensor-core version (kTensorCore), deterministic:
//   delta = rowsum(dout * out)                       (DeltaKernel, simple file)
//   dQ  per (query tile, head):   P = exp(S - lse), dS = P (dout V^T - delta),
//                                 dQ = scale * dS K          over the plan
//   dK, dV per (key tile, kv head): the same with roles swapped, over the
//                                 transposed plan and the group's query heads:
//                                 dV = P^T dout, dK = scale * dS^T Q.
// Same tiles as the forward (tree_attention_tiles.cuh); no atomics.
#include "kernels/tree_attention/tree_attention_bwd_tiles.cuh"

namespace tandem::kernels::detail {

cudaError_t LaunchDelta(const TreeAttnArgs& a, cudaStream_t s);  // tree_attention_simple.cu

namespace {
using namespace tc;

template <int D>
__global__ void __launch_bounds__(kThreads) DqTC(TreeAttnArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  constexpr int kE = Smem<D>::kTileElems;
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* dos = qs + kE;
  __nv_bfloat16* ks = dos + kE;     // 2 stages
  __nv_bfloat16* vs = ks + 2 * kE;  // 2 stages
  const int qt = blockIdx.x, h = blockIdx.y, hk = h / (a.Hq / a.Hkv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = qt * kTile;
  const int row0 = q0 + warp * 16 + lane / 4, row1 = row0 + 8;
  const float sl2 = a.scale * kLog2e;
  const float lse0 = row0 < a.T ? a.lse_in[static_cast<int64_t>(h) * a.T + row0] * kLog2e : 0.f;
  const float lse1 = row1 < a.T ? a.lse_in[static_cast<int64_t>(h) * a.T + row1] * kLog2e : 0.f;
  const float dl0 = row0 < a.T ? a.delta[static_cast<int64_t>(h) * a.T + row0] : 0.f;
  const float dl1 = row1 < a.T ? a.delta[static_cast<int64_t>(h) * a.T + row1] : 0.f;

  TileCursor cur(a.q_ptr, a.kv_ranges, qt);
  LoadTileAsync<D>(qs, a.q, q0, a.T, a.Hq, h);
  LoadTileAsync<D>(dos, a.dout, q0, a.T, a.Hq, h);
  if (cur.tile >= 0) {
    LoadTileAsync<D>(ks, a.k, cur.tile * kTile, a.T, a.Hkv, hk);
    LoadTileAsync<D>(vs, a.v, cur.tile * kTile, a.T, a.Hkv, hk);
  }
  CpAsyncCommit();
  float dq[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.f;
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
    float s[8][4], dp[8][4];
    GemmRowsRowsT<D>(s, qs + warp * 16 * Smem<D>::kLd, ks + stage * kE, lane);
    GemmRowsRowsT<D>(dp, dos + warp * 16 * Smem<D>::kLd, vs + stage * kE, lane);
    const int k0 = cur.tile * kTile;
    const bool full = k0 + kTile <= q0 && k0 + kTile <= a.T && __ldg(a.tile_kend_min + cur.tile) >= q0 + kTile;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float p = exp2f(fmaf(s[nt][e], sl2, -(e < 2 ? lse0 : lse1)));
        if (!full) {
          const int col = k0 + nt * 8 + (lane % 4) * 2 + (e & 1);
          const int row = e < 2 ? row0 : row1;
          const int kend = col < a.T ? __ldg(a.kend + col) : 0;
          p = (col <= row && row < kend) ? p : 0.f;
        }
        s[nt][e] = p * (dp[nt][e] - (e < 2 ? dl0 : dl1));  // dS
      }
    }
    GemmRegsRows<D>(dq, s, ks + stage * kE, lane);
    __syncthreads();
    cur.Advance();
    stage ^= 1;
  }
#pragma unroll
  for (int i = 0; i < D / 8; ++i) {
    const int col = i * 8 + (lane % 4) * 2;
    if (row0 < a.T) {
      *reinterpret_cast<__nv_bfloat162*>(a.dq + (static_cast<int64_t>(row0) * a.Hq + h) * D + col) =
          __floats2bfloat162_rn(dq[i][0] * a.scale, dq[i][1] * a.scale);
    }
    if (row1 < a.T) {
      *reinterpret_cast<__nv_bfloat162*>(a.dq + (static_cast<int64_t>(row1) * a.Hq + h) * D + col) =
          __floats2bfloat162_rn(dq[i][2] * a.scale, dq[i][3] * a.scale);
    }
  }
}

template <int D>
__global__ void __launch_bounds__(kThreads) DkvTC(TreeAttnArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  constexpr int kE = Smem<D>::kTileElems;
  __nv_bfloat16* ks = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* vs = ks + kE;
  __nv_bfloat16* qs = vs + kE;       // 2 stages
  __nv_bfloat16* dos = qs + 2 * kE;  // 2 stages
  float* lse_s = reinterpret_cast<float*>(dos + 2 * kE);  // [2][64], log2 units
  float* delta_s = lse_s + 2 * kTile;                     // [2][64]
  const int kt = blockIdx.x, hk = blockIdx.y, G = a.Hq / a.Hkv;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int k0 = kt * kTile;
  const KeyRows krows(a, k0, warp, lane);
  const float sl2 = a.scale * kLog2e;
  const int tile_kend_min = a.tile_kend_min[kt];

  // Items: (head h, query tile) for h in the group, tiles from the transposed plan.
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
    const bool full = k0 + kTile <= q0 && k0 + kTile <= a.T && tile_kend_min >= q0 + kTile;
    float ds[8][4];
    KeyTileGrads<D>(dk, dv, ds, ks + warp * 16 * Smem<D>::kLd, vs + warp * 16 * Smem<D>::kLd, qs + stage * kE,
                    dos + stage * kE, lse_s + stage * kTile, delta_s + stage * kTile, q0, full, krows, sl2, lane);
    __syncthreads();
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

template <int D>
cudaError_t LaunchBackwardTC(const TreeAttnArgs& a, cudaStream_t s) {
  cudaError_t e = LaunchDelta(a, s);
  if (e != cudaSuccess) return e;
  const int smem_q = 6 * Smem<D>::kTileElems * static_cast<int>(sizeof(__nv_bfloat16));
  if ((e = cudaFuncSetAttribute(DqTC<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_q)) != cudaSuccess) return e;
  DqTC<D><<<dim3(a.num_tiles, a.Hq), kThreads, smem_q, s>>>(a);
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  const int smem_kv = smem_q + 4 * kTile * static_cast<int>(sizeof(float));
  if ((e = cudaFuncSetAttribute(DkvTC<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_kv)) != cudaSuccess) return e;
  DkvTC<D><<<dim3(a.num_tiles, a.Hkv), kThreads, smem_kv, s>>>(a);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchBackwardTensorCore(const TreeAttnArgs& a, cudaStream_t s) {
  if (a.D == 128) return LaunchBackwardTC<128>(a, s);
#ifndef TANDEM_CUDA_CI_SUBSET
  if (a.D == 64) return LaunchBackwardTC<64>(a, s);
#endif
  return cudaErrorInvalidValue;
}

}  // namespace tandem::kernels::detail
