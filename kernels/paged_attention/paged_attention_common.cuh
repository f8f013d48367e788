// Internal: device helpers the paged attention kernels (paged_attention.cu's
// tiles, paged_attention_warps.cu's warps, paged_attention_mma.cu's mma)
// share: bf16 unpacking, and how a block writes its rows, so that NaN rows,
// empty rows and split partials mean the same whichever kernel ran.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/common/dependent_launch.cuh"
#include "kernels/paged_attention/paged_attention_launch.h"

namespace tandem::kernels::detail {

__device__ __forceinline__ float PagedNan() { return __int_as_float(0x7fffffff); }

__device__ __forceinline__ void Bf16x8(const uint4& raw, float (&f)[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 x = __bfloat1622float2(h[i]);
    f[2 * i] = x.x;
    f[2 * i + 1] = x.y;
  }
}

// The output row (token * Hq + head) of row rr of the block of kv head h
// for a sequence whose new tokens start at q0 (rows: new token rr / G,
// query head h * G + rr % G).
__device__ __forceinline__ int64_t PagedOutRow(const PagedAttnArgs& a, int q0, int h, int G, int rr) {
  return static_cast<int64_t>(q0 + rr / G) * a.Hq + h * G + rr % G;
}

// A sequence with unusable lengths: NaN rows, written here without splits
// (with splits the combine writes them). `threads` threads from `tid`.
template <int D>
__device__ __forceinline__ void PagedNanRows(const PagedAttnArgs& a, int q0, int h, int G, int R, int tid,
                                             int threads) {
  if (a.num_splits != 1) return;
  for (int i = tid; i < R * D; i += threads) {
    a.out[PagedOutRow(a, q0, h, G, i / D) * D + i % D] = __float2bfloat16(PagedNan());
  }
}

// Element d of an output row from the split's unnormalised sum `acc`, its
// softmax denominator l and running max m (log2 units): without splits the
// bf16 output (NaN when the sequence is bad or saw no key), with splits the
// fp32 partial acc / l and, for d == 0, its log-sum-exp.
template <int D>
__device__ __forceinline__ void PagedStore(const PagedAttnArgs& a, int64_t row, int split, int d, bool bad, float acc,
                                           float l, float m) {
  if (a.num_splits == 1) {
    a.out[row * D + d] = __float2bfloat16(bad || !(l > 0.f) ? PagedNan() : acc / l);
    return;
  }
  const int64_t pidx = row * a.num_splits + split;
  a.part_o[pidx * D + d] = bad ? PagedNan() : (l > 0.f ? acc / l : 0.f);
  if (d == 0) a.part_lse[pidx] = bad ? PagedNan() : (l > 0.f ? m + log2f(l) : -INFINITY);
}

// exp2(x - m) for a running max m that may still be -inf (nothing seen).
__device__ __forceinline__ float PagedScale(float x, float m) { return x == -INFINITY ? 0.f : exp2f(x - m); }

// One warp's partial of an output element over the keys it read: the
// unnormalised sum o, the softmax denominator l and the running max m.
struct PagedPartial {
  float o, l, m;
};

// Element d of output row `row` from W warps' partials (part(w), a
// PagedPartial), merged at their common max and stored as PagedStore does.
template <int D, int W, typename Part>
__device__ __forceinline__ void PagedStoreMerged(const PagedAttnArgs& a, int64_t row, int split, int d, bool bad,
                                                 Part part) {
  float mm = -INFINITY;
#pragma unroll
  for (int w = 0; w < W; ++w) mm = fmaxf(mm, part(w).m);
  float acc = 0.f, sum = 0.f;
#pragma unroll
  for (int w = 0; w < W; ++w) {
    const PagedPartial p = part(w);
    const float sc = PagedScale(p.m, mm);
    acc += p.o * sc;
    sum += p.l * sc;
  }
  PagedStore<D>(a, row, split, d, bad, acc, sum, mm);
}

}  // namespace tandem::kernels::detail
