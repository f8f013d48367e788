// The warps kernel of paged decode attention (paged_attention_cuda.h,
// PagedKernel::kWarps): for sequences with at most RM rows per kv head (one
// new token and a GQA group of at most 4, the decode step), where the tiles
// kernel's shared-memory stages, three barriers per tile and padded row
// tiles cost more than the arithmetic.
//
// One block of 4 warps per (kv head, sequence, split), as the tiles kernel,
// so the split plan and the combine are the same. The split's keys are dealt
// to the warps in chunks; no shared memory and no barrier until the end:
//   - a key row is read by L = D / 8 lanes, 16 bytes each, straight into
//     registers; a warp loads 32 / L keys at once and U = 4 such loads of K
//     and of V are in flight per lane before any arithmetic;
//   - each lane holds its 8 dimensions of the q rows (fp32, scale * log2 e
//     folded in); a score is the lane's partial dot summed over its L lanes
//     by shuffles;
//   - each lane group keeps its own online softmax (max, sum, 8 output
//     dimensions per row) over the keys it read;
// at the end the lane groups of a warp merge by shuffles, the warps through
// shared memory, and the block writes its rows as the tiles kernel does
// (paged_attention_common.cuh). A clustered plan (kCluster) loads the first
// chunk's old keys before waiting for the kernel before, and merges the
// splits in the cluster (PagedClusterMerge).
#include <type_traits>

#include "kernels/paged_attention/paged_attention_common.cuh"
#include "kernels/paged_attention/paged_attention_rules.h"

namespace tandem::kernels::detail {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float Dot8(const float (&x)[8], const float (&y)[8]) {
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < 8; ++j) s = fmaf(x[j], y[j], s);
  return s;
}

// kCluster: a clustered plan (PagedAttnArgs::cluster); its early loads
// take registers, hence fewer blocks a multiprocessor.
template <int D, int RM, bool kCluster>
__global__ void __launch_bounds__(kThreads, kCluster ? (RM > 2 ? 3 : 4) : (RM > 2 ? 4 : 6))
    PagedWarpsKernel(const PagedAttnArgs a) {
  LetDependentsLaunch();  // the kernel after it may start (a decode GEMV loads its weights)
  // A clustered plan reads, until its WaitForPriorKernels below, only what
  // no kernel still running writes (paged_attention_cuda.h): the metadata,
  // and the keys and values before the sequence's new tokens. Otherwise
  // the kernel before (which wrote q and the new keys) comes first.
  if constexpr (!kCluster) WaitForPriorKernels();
  constexpr int L = D / 8;       // lanes per key row
  constexpr int KPL = 32 / L;    // keys per warp-wide load
  constexpr int U = 4;           // loads of K (and of V) in flight per lane
  constexpr int CK = U * KPL;    // keys per warp and chunk
  __shared__ float o_s[kWarps][RM][D];
  __shared__ float m_s[kWarps][RM], l_s[kWarps][RM];
  __shared__ std::conditional_t<kCluster, PagedClusterRows<D, RM>, char> part_s;  // the split's partial

  const int h = blockIdx.x, b = blockIdx.y, split = blockIdx.z, tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32, grp = lane / L, sub = lane % L;
  const int q0 = a.q_starts[b], q1 = a.q_starts[b + 1];
  if (!PagedRowsValid(q0, q1, a.T)) return;  // rows unknown: skipped
  const int q_len = q1 - q0, ctx = a.context_lens[b];
  const int G = a.Hq / a.Hkv, R = q_len * G;
  const int nsplit = PagedSeqSplits(q_len, ctx, a.capacity, a.num_splits, a.min_split_tokens);
  if (nsplit == 0) {
    WaitForPriorKernels();  // (a second wait returns at once)
    PagedNanRows<D>(a, q0, h, G, R, tid, kThreads);
    return;
  }
  if (!kCluster && split >= nsplit) return;  // (in a cluster an empty split still takes part in the merge)
  if (R > RM) {  // more rows than max_rows promised (q_starts not as the host said): NaN rows
    WaitForPriorKernels();
    if (split >= nsplit) return;
    for (int i = tid; i < R * D; i += kThreads) {
      PagedStore<D>(a, PagedOutRow(a, q0, h, G, i / D), split, i % D, /*bad=*/true, 0.f, 0.f, 0.f);
    }
    return;
  }
  const int split_len = PagedSplitLen(ctx, a.num_splits, a.min_split_tokens);
  // (In a cluster, a split past the sequence's own starts at ctx: empty.)
  const int kv_begin = kCluster ? static_cast<int>(min(int64_t{split} * split_len, int64_t{ctx})) : split * split_len;
  const int kv_end = min(kv_begin + split_len, ctx);
  const int old_end = ctx - q_len;  // keys before the new tokens
  const int32_t* table = a.block_table + static_cast<int64_t>(b) * a.max_blocks_per_seq;
  const int bs_log2 = a.block_size_log2, bs_mask = (1 << bs_log2) - 1;

  bool bad = false;
  uint4 kr[U], vr[U];
  // Loads the chunk at k0: the block ids, then K and V of the keys in
  // [lo, hi), hi <= kv_end; the others keep their registers when `keep`,
  // else become zero. A block id out of range marks the sequence bad.
  auto load = [&](int k0, int lo, int hi, bool keep) {
    int blk[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int t = k0 + u * KPL + grp;
      const bool in = t >= lo && t < hi;
      const int id = in ? table[t >> bs_log2] : -1;
      const bool ok = id >= 0 && id < a.num_blocks;
      bad = bad || (in && !ok);
      blk[u] = ok ? id : -1;  // -1: not loaded
    }
    int64_t off[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int t = k0 + u * KPL + grp;
      off[u] = (((static_cast<int64_t>(blk[u]) << bs_log2) + (t & bs_mask)) * a.Hkv + h) * D + sub * 8;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (blk[u] >= 0) kr[u] = __ldg(reinterpret_cast<const uint4*>(a.key_blocks + off[u]));
      else if (!keep) kr[u] = make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (blk[u] >= 0) vr[u] = __ldg(reinterpret_cast<const uint4*>(a.value_blocks + off[u]));
      else if (!keep) vr[u] = make_uint4(0u, 0u, 0u, 0u);
    }
  };
  // A clustered plan: the first chunk's old keys while the kernels before
  // finish; then q and the new keys.
  const int first_k0 = kv_begin + warp * CK;
  const int early_end = kCluster ? min(old_end, kv_end) : 0;  // keys [0, early_end) loaded before the wait
  if constexpr (kCluster) {
    if (first_k0 < kv_end) load(first_k0, 0, early_end, /*keep=*/false);
    WaitForPriorKernels();  // the kernel before wrote q and the new keys
  }

  // This lane's 8 dimensions of each row's q; rows past R are zero and see no key.
  float q[RM][8], o[RM][8], m[RM], l[RM];
  int limit[RM];
#pragma unroll
  for (int r = 0; r < RM; ++r) {
    float f[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    limit[r] = 0;
    if (r < R) {
      Bf16x8(*reinterpret_cast<const uint4*>(a.q + PagedOutRow(a, q0, h, G, r) * D + sub * 8), f);
      limit[r] = min(PagedVisibleKeys(ctx, q_len, r / G), kv_end);
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      q[r][j] = f[j] * a.scale_log2;
      o[r][j] = 0.f;
    }
    m[r] = -INFINITY;
    l[r] = 0.f;
  }

  for (int k0 = first_k0; k0 < kv_end; k0 += kWarps * CK) {
    const bool early = kCluster && k0 == first_k0;  // keys before early_end are in kr and vr
    load(k0, early ? early_end : 0, kv_end, /*keep=*/early);
    float s[U][RM];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float kf[8];
      Bf16x8(kr[u], kf);
#pragma unroll
      for (int r = 0; r < RM; ++r) s[u][r] = Dot8(q[r], kf);
    }
#pragma unroll
    for (int w = L / 2; w > 0; w /= 2) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
#pragma unroll
        for (int r = 0; r < RM; ++r) s[u][r] += __shfl_xor_sync(kFull, s[u][r], w);
      }
    }
    // Online softmax per row over this chunk's keys; s becomes p.
#pragma unroll
    for (int r = 0; r < RM; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (k0 + u * KPL + grp >= limit[r]) s[u][r] = -INFINITY;
        mx = fmaxf(mx, s[u][r]);
      }
      const float m_new = fmaxf(m[r], mx);
      const float alpha = PagedScale(m[r], m_new);
      m[r] = m_new;
      l[r] *= alpha;
#pragma unroll
      for (int j = 0; j < 8; ++j) o[r][j] *= alpha;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        s[u][r] = PagedScale(s[u][r], m_new);
        l[r] += s[u][r];
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      float vf[8];
      Bf16x8(vr[u], vf);
#pragma unroll
      for (int r = 0; r < RM; ++r) {
#pragma unroll
        for (int j = 0; j < 8; ++j) o[r][j] = fmaf(s[u][r], vf[j], o[r][j]);
      }
    }
  }

  // Merge the warp's lane groups (same dimensions, other keys).
#pragma unroll
  for (int w = L; w < 32; w *= 2) {
#pragma unroll
    for (int r = 0; r < RM; ++r) {
      const float m_o = __shfl_xor_sync(kFull, m[r], w), l_o = __shfl_xor_sync(kFull, l[r], w);
      const float mm = fmaxf(m[r], m_o), sa = PagedScale(m[r], mm), sb = PagedScale(m_o, mm);
      l[r] = l[r] * sa + l_o * sb;
#pragma unroll
      for (int j = 0; j < 8; ++j) o[r][j] = o[r][j] * sa + __shfl_xor_sync(kFull, o[r][j], w) * sb;
      m[r] = mm;
    }
  }
  if (grp == 0) {
#pragma unroll
    for (int r = 0; r < RM; ++r) {
#pragma unroll
      for (int j = 0; j < 8; ++j) o_s[warp][r][sub * 8 + j] = o[r][j];
      if (sub == 0) {
        m_s[warp][r] = m[r];
        l_s[warp][r] = l[r];
      }
    }
  }
  bad = __syncthreads_or(bad) != 0;
  // Then the warps; thread (row, d) merges the element, and writes it (or
  // puts it in the block's partial, for the cluster merge).
  for (int i = tid; i < R * D; i += kThreads) {
    const int r = i / D, d = i % D;
    const PagedPartial p =
        PagedMergeWarps<kWarps>([&](int w) { return PagedPartial{o_s[w][r][d], l_s[w][r], m_s[w][r]}; });
    if constexpr (kCluster) PagedClusterPut<D, RM>(part_s, r, d, bad, p.o, p.l, p.m);
    else PagedStore<D>(a, PagedOutRow(a, q0, h, G, r), split, d, bad, p.o, p.l, p.m);
  }
  if constexpr (kCluster) PagedClusterMerge<D, RM>(a, part_s, q0, h, G, R, tid, kThreads);
}

template <int D, int RM>
cudaError_t Launch(const PagedAttnArgs& a, cudaStream_t s) {
  const dim3 grid(a.Hkv, a.B, a.num_splits);
  if (!a.cluster) return LaunchDependent(&PagedWarpsKernel<D, RM, false>, grid, dim3(kThreads), 0, s, a);
  return LaunchDependentInClusters(&PagedWarpsKernel<D, RM, true>, grid, dim3(kThreads), dim3(1, 1, a.num_splits), 0,
                                   s, a);
}

template <int D>
cudaError_t LaunchRows(const PagedAttnArgs& a, cudaStream_t s) {
  if (a.max_rows <= 1) return Launch<D, 1>(a, s);
  if (a.max_rows <= 2) return Launch<D, 2>(a, s);
  if (a.max_rows <= kPagedWarpsMaxRows) return Launch<D, kPagedWarpsMaxRows>(a, s);
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t LaunchPagedWarpsKernel(const PagedAttnArgs& a, cudaStream_t s) {
  if (a.D == 128) return LaunchRows<128>(a, s);
#ifndef TANDEM_CUDA_CI_SUBSET
  if (a.D == 64) return LaunchRows<64>(a, s);
#endif
  return cudaErrorInvalidValue;
}

}  // namespace tandem::kernels::detail
