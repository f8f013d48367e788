// Internal: the key-side step shared by the tensor-core backward kernels
// (tree_attention_bwd.cu's DkvTC, tree_attention_bwd_fused.cu's one-pass
// variants). One warp owns 16 keys (rows krow0 = k0 + 16 warp + lane / 4 and
// krow1 = krow0 + 8 of its fragments) and meets one 64-row query tile:
//   S^T = K Q^T, dP^T = V dO^T, P^T = exp(S^T - lse), dS^T = P^T (dP^T - delta)
//   dV += P^T dO, dK += dS^T Q
// `full` says the whole tile pair is visible (no per-element mask).
#pragma once

#include "kernels/tree_attention/tree_attention_tiles.cuh"

namespace tandem::kernels::detail {
namespace tc {

// The two key rows of a lane's fragments and where their visibility ends.
struct KeyRows {
  int row0, row1, kend0, kend1;
  __device__ KeyRows(const TreeAttnArgs& a, int k0, int warp, int lane)
      : row0(k0 + warp * 16 + lane / 4),
        row1(row0 + 8),
        kend0(row0 < a.T ? a.kend[row0] : 0),
        kend1(row1 < a.T ? a.kend[row1] : 0) {}
};

// Query tile `tile` of head hh for the step, by kThreads threads: its Q and
// dO rows (cp.async; the caller commits), lse (log2 units) and delta.
template <int D>
__device__ __forceinline__ void LoadQueryItem(const TreeAttnArgs& a, int hh, int tile, __nv_bfloat16* qs,
                                              __nv_bfloat16* dos, float* lse_s, float* delta_s) {
  LoadTileAsync<D>(qs, a.q, tile * kTile, a.T, a.Hq, hh);
  LoadTileAsync<D>(dos, a.dout, tile * kTile, a.T, a.Hq, hh);
  if (threadIdx.x < kTile) {
    const int q = tile * kTile + threadIdx.x;
    lse_s[threadIdx.x] = q < a.T ? a.lse_in[static_cast<int64_t>(hh) * a.T + q] * kLog2e : 0.f;
    delta_s[threadIdx.x] = q < a.T ? a.delta[static_cast<int64_t>(hh) * a.T + q] : 0.f;
  }
}

template <int D>
__device__ __forceinline__ void ZeroKeyGrads(float (&dk)[D / 8][4], float (&dv)[D / 8][4]) {
#pragma unroll
  for (int i = 0; i < D / 8; ++i) {
    dk[i][0] = dk[i][1] = dk[i][2] = dk[i][3] = 0.f;
    dv[i][0] = dv[i][1] = dv[i][2] = dv[i][3] = 0.f;
  }
}

// The step above for this warp's keys (`ks_w`, `vs_w`: its 16 rows in smem)
// against query tile q0 (`qs`, `dos`: 64 rows; `lse_s` in log2 units and
// `delta_s`: 64 each). Leaves dS^T (16 keys x 64 queries) in `ds`.
template <int D>
__device__ __forceinline__ void KeyTileGrads(float (&dk)[D / 8][4], float (&dv)[D / 8][4], float (&ds)[8][4],
                                             const __nv_bfloat16* ks_w, const __nv_bfloat16* vs_w,
                                             const __nv_bfloat16* qs, const __nv_bfloat16* dos, const float* lse_s,
                                             const float* delta_s, int q0, bool full, const KeyRows& k, float sl2,
                                             int lane) {
  float s[8][4];
  GemmRowsRowsT<D>(s, ks_w, qs, lane);
  GemmRowsRowsT<D>(ds, vs_w, dos, lane);
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = nt * 8 + (lane % 4) * 2 + (e & 1);
      const int q = q0 + c;
      float p = exp2f(fmaf(s[nt][e], sl2, -lse_s[c]));
      if (!full) p = (e < 2 ? (k.row0 <= q && q < k.kend0) : (k.row1 <= q && q < k.kend1)) ? p : 0.f;
      s[nt][e] = p;
      ds[nt][e] = p * (ds[nt][e] - delta_s[c]);
    }
  }
  GemmRegsRows<D>(dv, s, dos, lane);
  GemmRegsRows<D>(dk, ds, qs, lane);
}

// dK = scale * dk and dV = dv, bf16, for kv head hk.
template <int D>
__device__ __forceinline__ void StoreKeyGrads(const TreeAttnArgs& a, const float (&dk)[D / 8][4],
                                              const float (&dv)[D / 8][4], const KeyRows& k, int hk, int lane) {
#pragma unroll
  for (int i = 0; i < D / 8; ++i) {
    const int col = i * 8 + (lane % 4) * 2;
    if (k.row0 < a.T) {
      const int64_t o = (static_cast<int64_t>(k.row0) * a.Hkv + hk) * D + col;
      *reinterpret_cast<__nv_bfloat162*>(a.dk + o) = __floats2bfloat162_rn(dk[i][0] * a.scale, dk[i][1] * a.scale);
      *reinterpret_cast<__nv_bfloat162*>(a.dv + o) = __floats2bfloat162_rn(dv[i][0], dv[i][1]);
    }
    if (k.row1 < a.T) {
      const int64_t o = (static_cast<int64_t>(k.row1) * a.Hkv + hk) * D + col;
      *reinterpret_cast<__nv_bfloat162*>(a.dk + o) = __floats2bfloat162_rn(dk[i][2] * a.scale, dk[i][3] * a.scale);
      *reinterpret_cast<__nv_bfloat162*>(a.dv + o) = __floats2bfloat162_rn(dv[i][2], dv[i][3]);
    }
  }
}

}  // namespace tc
}  // namespace tandem::kernels::detail
