// Internal: tile helpers shared by the tensor-core tree attention kernels
// (tree_attention.cu forward, tree_attention_bwd.cu backward): smem tile
// layout, cp.async tile loads, the plan cursors (one plan row; the union of
// two rows) and the two warp GEMM shapes.
#pragma once

#include "kernels/tree_attention/mma_sm80.cuh"
#include "kernels/tree_attention/tree_attention_launch.h"

namespace tandem::kernels::detail {
namespace tc {

constexpr int kTile = 64;
constexpr int kThreads = 128;
constexpr float kLog2e = 1.4426950408889634f;

template <int D>
struct Smem {
  static constexpr int kLd = D + 8;  // padded row: ldmatrix rows hit distinct banks
  static constexpr int kTileElems = kTile * kLd;
};

// rows [r0, r0+64) of head h of a [T, H, D] tensor into smem (row stride D+8);
// rows past T are zero-filled.
template <int D>
__device__ __forceinline__ void LoadTileAsync(__nv_bfloat16* dst, const __nv_bfloat16* src, int r0, int T, int H,
                                              int h) {
  constexpr int kChunks = D / 8;
  for (int i = threadIdx.x; i < kTile * kChunks; i += kThreads) {
    const int r = i / kChunks, c = (i % kChunks) * 8;
    const bool valid = r0 + r < T;
    const __nv_bfloat16* g = valid ? src + (static_cast<int64_t>(r0 + r) * H + h) * D + c : src;
    CpAsync16(dst + r * Smem<D>::kLd + c, g, valid);
  }
}

// Walks the (range, tile) pairs of one CSR row of a plan.
struct TileCursor {
  const int32_t* ranges;
  int j, j_end, tile;
  __device__ TileCursor(const int32_t* ptr, const int32_t* rg, int row)
      : ranges(rg), j(ptr[row]), j_end(ptr[row + 1]), tile(j < j_end ? rg[2 * j] : -1) {}
  __device__ int Next() const {
    if (tile + 1 < ranges[2 * j + 1]) return tile + 1;
    return j + 1 < j_end ? ranges[2 * (j + 1)] : -1;
  }
  __device__ void Advance() {
    const int n = Next();
    if (tile + 1 >= ranges[2 * j + 1]) ++j;
    tile = n;
  }
};

__device__ __forceinline__ int MinTile(int x, int y) { return x < 0 ? y : (y < 0 ? x : min(x, y)); }

// The union, in ascending order, of the key-tile lists of two plan rows.
struct PairCursor {
  TileCursor a, b;
  int tile;
  __device__ PairCursor(const int32_t* ptr, const int32_t* rg, int row_a, bool has_b)
      : a(ptr, rg, row_a), b(ptr, rg, has_b ? row_a + 1 : row_a), tile(-1) {
    if (!has_b) b.tile = -1;
    tile = MinTile(a.tile, b.tile);
  }
  __device__ int Next() const {
    const int na = a.tile == tile ? a.Next() : a.tile;
    const int nb = b.tile == tile ? b.Next() : b.tile;
    return MinTile(na, nb);
  }
  __device__ void Advance() {
    if (a.tile == tile) a.Advance();
    if (b.tile == tile) b.Advance();
    tile = MinTile(a.tile, b.tile);
  }
};

// S (16 x 64 per warp) = A-rows (16 x D in smem at `a`) * B-rows^T (64 x D in smem at `b`).
template <int D>
__device__ __forceinline__ void GemmRowsRowsT(float (&s)[8][4], const __nv_bfloat16* a, const __nv_bfloat16* b,
                                              int lane) {
  constexpr int kLd = Smem<D>::kLd;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    uint32_t af[4];
    LdMatrixX4(af, a + ((lane % 8) + ((lane / 8) % 2) * 8) * kLd + ks * 16 + (lane / 16) * 8);
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      uint32_t bf[4];
      LdMatrixX4(bf, b + (np * 16 + (lane % 8) + (lane / 16) * 8) * kLd + ks * 16 + ((lane / 8) % 2) * 8);
      Mma16816(s[2 * np], af, bf[0], bf[1]);
      Mma16816(s[2 * np + 1], af, bf[2], bf[3]);
    }
  }
}

// acc (16 x D per warp) += P (16 x 64, registers in C layout) * B (64 x D in smem at `b`).
template <int D>
__device__ __forceinline__ void GemmRegsRows(float (&acc)[D / 8][4], const float (&p)[8][4], const __nv_bfloat16* b,
                                             int lane) {
  constexpr int kLd = Smem<D>::kLd;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint32_t pa[4] = {PackBf16(p[2 * kk][0], p[2 * kk][1]), PackBf16(p[2 * kk][2], p[2 * kk][3]),
                            PackBf16(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                            PackBf16(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t bf[4];
      LdMatrixX4Trans(bf, b + (kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * kLd + dp * 16 + (lane / 16) * 8);
      Mma16816(acc[2 * dp], pa, bf[0], bf[1]);
      Mma16816(acc[2 * dp + 1], pa, bf[2], bf[3]);
    }
  }
}

}  // namespace tc
}  // namespace tandem::kernels::detail
