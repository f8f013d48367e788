// Internal: device helpers the paged attention kernels (paged_attention.cu's
// tiles, paged_attention_warps.cu's warps, paged_attention_mma.cu's mma)
// share: bf16 unpacking, and how a block writes its rows, so that NaN rows,
// empty rows and split partials mean the same whichever kernel ran.
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/common/dependent_launch.cuh"
#include "kernels/paged_attention/paged_attention.h"
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

// Whether the blocks write bf16 `out` themselves: without splits, or with
// splits merged in their cluster. Otherwise they write partials for the
// combine kernel.
__device__ __forceinline__ bool PagedWritesOut(const PagedAttnArgs& a) { return a.num_splits == 1 || a.cluster; }

// A sequence with unusable lengths: NaN rows, written here where the blocks
// write out (with a combine kernel, it writes them; in a cluster every block
// writes the same rows). `threads` threads from `tid`.
template <int D>
__device__ __forceinline__ void PagedNanRows(const PagedAttnArgs& a, int q0, int h, int G, int R, int tid,
                                             int threads) {
  if (!PagedWritesOut(a)) return;
  for (int i = tid; i < R * D; i += threads) {
    a.out[PagedOutRow(a, q0, h, G, i / D) * D + i % D] = __float2bfloat16(PagedNan());
  }
}

// Element d of an output row from the split's unnormalised sum `acc`, its
// softmax denominator l and running max m (log2 units): where the blocks
// write out (PagedWritesOut) the bf16 output (NaN when the sequence is bad
// or saw no key), else the fp32 partial acc / l and, for d == 0, its
// log-sum-exp. (A clustered split stores its partial with PagedClusterPut.)
template <int D>
__device__ __forceinline__ void PagedStore(const PagedAttnArgs& a, int64_t row, int split, int d, bool bad, float acc,
                                           float l, float m) {
  if (PagedWritesOut(a)) {
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

// W warps' partials of one element (part(w), a PagedPartial) merged at
// their common max.
template <int W, typename Part>
__device__ __forceinline__ PagedPartial PagedMergeWarps(Part part) {
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
  return {acc, sum, mm};
}

// A split's partial rows in its block's shared memory, for the cluster
// merge (PagedAttnArgs::cluster): RM rows of D, normalised (o / l), and
// their log-sum-exp (log2 units; -inf: no key seen, NaN: bad sequence).
template <int D, int RM>
struct PagedClusterRows {
  float o[RM][D];
  float lse[RM];
};

// Element d of row r of the block's partial, from the split's sum `acc`,
// denominator l and max m as PagedStore takes them.
template <int D, int RM>
__device__ __forceinline__ void PagedClusterPut(PagedClusterRows<D, RM>& part, int r, int d, bool bad, float acc,
                                                float l, float m) {
  part.o[r][d] = bad ? PagedNan() : (l > 0.f ? acc / l : 0.f);
  if (d == 0) part.lse[r] = bad ? PagedNan() : (l > 0.f ? m + log2f(l) : -INFINITY);
}

// The cluster merge, called by every thread of every block of the cluster
// (the splits of one kv head and sequence, in split order) once each block
// has put its R rows: the merged rows into bf16 `out` (NaN where a split was
// bad or no split saw a key), the cluster's blocks sharing the elements and
// reading the partials in distributed shared memory. Returns once no block
// reads this block's partial any more.
template <int D, int RM>
__device__ __forceinline__ void PagedClusterMerge(const PagedAttnArgs& a, PagedClusterRows<D, RM>& part, int q0,
                                                  int h, int G, int R, int tid, int threads) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every split's partial is in place
  const int n = static_cast<int>(cluster.num_blocks()), rank = static_cast<int>(cluster.block_rank());
  for (int i = rank * threads + tid; i < R * D; i += n * threads) {
    const int r = i / D, d = i % D;
    float lse[kPagedMaxClusterSplits], o[kPagedMaxClusterSplits];
    float mx = -INFINITY;
    bool bad = false;
#pragma unroll
    for (int s = 0; s < kPagedMaxClusterSplits; ++s) {
      if (s < n) {
        PagedClusterRows<D, RM>* other = cluster.map_shared_rank(&part, s);
        lse[s] = other->lse[r];
        o[s] = other->o[r][d];
        bad = bad || isnan(lse[s]);
        mx = fmaxf(mx, lse[s]);
      }
    }
    float acc = 0.f, sum = 0.f;
#pragma unroll
    for (int s = 0; s < kPagedMaxClusterSplits; ++s) {
      if (s < n && lse[s] != -INFINITY) {
        const float w = exp2f(lse[s] - mx);
        acc += w * o[s];
        sum += w;
      }
    }
    a.out[PagedOutRow(a, q0, h, G, r) * D + d] =
        __float2bfloat16(bad || mx == -INFINITY ? PagedNan() : acc / sum);
  }
  cluster.sync();  // the other blocks are done reading this one's partial
#endif
}

}  // namespace tandem::kernels::detail
