// The mma kernel of paged decode attention (paged_attention_cuda.h,
// PagedKernel::kMma): tensor cores for the rows of a GQA group, where the
// warps kernel's registers do not reach (more than 4 rows per kv head: a
// decode step of a model with 8 query heads per kv head, or several new
// tokens a sequence) and the tiles kernel spends its time in CUDA-core
// FMAs (each K/V element serves 8+ rows; docs/benchmarks.md "Where the
// 3.1B model's batch-64 step goes").
//
// One block of 4 warps per (kv head, sequence, split), as the other
// kernels, so the split plan and the combine are the same. The block's rows
// (q_len * Hq / Hkv) go 16 at a time (the M of mma.m16n8k16, rows past R
// zero); for each row group the split's keys are dealt to the warps 16 at a
// time and read straight from global memory into mma fragments, no shared
// memory and no barrier until the end:
//   - scores S[16 x 16] = Q K^T: two n-tiles of 8 keys. Lane (g, c) = (lane
//     / 4, lane % 4) loads key g of each tile, 16 bytes per 32 dimensions
//     (dims 32j + 8c .. +8), and uses them as the B fragments of two k-slices;
//     q's A fragments are loaded with the same permutation of the dimensions
//     (a dot product does not care about their order);
//   - the block ids of a warp's next 32 chunks are loaded at once, a lane
//     each, and passed round by shuffles (blocks of >= 16 tokens; smaller
//     blocks are looked up per key);
//   - an online softmax per row (the 4 lanes of a quad hold a row's 16
//     scores), p rounded to bf16 as the A fragment of P V (the score tiles'
//     accumulator layout is the A layout);
//   - O[16 x D] += P V: lane (g, c) loads keys 2c, 2c+1, 2c+8, 2c+9 of the 16,
//     dims [g D/8, (g+1) D/8) of each (16 or 32 contiguous bytes), and pairs
//     two keys' halves of one dimension into a B fragment (byte permutes);
//     n-tile t's column g is dimension g D/8 + t, so a lane's accumulators
//     hold dims [2c D/8, (2c+2) D/8) of its two rows.
// At the end the warps merge through shared memory (the log-sum-exp merge of
// the warps kernel) and the block writes its rows as the other kernels do
// (paged_attention_common.cuh). P in bf16 is the one rounding the other
// kernels do not have (as in flash attention); the GPU test's bf16
// tolerance holds it. A clustered plan (kCluster) loads the first chunk's
// old keys before waiting for the kernel before, and merges the splits in
// the cluster (PagedClusterMerge) from one 16-row group's partial.
#include <type_traits>

#include "kernels/paged_attention/paged_attention_common.cuh"
#include "kernels/paged_attention/paged_attention_rules.h"
#include "kernels/tree_attention/mma_sm80.cuh"  // Mma16816, PackBf16

namespace tandem::kernels::detail {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kRows = 16;  // rows per row group: the mma's M
constexpr int kKeys = 16;  // keys per warp step: two score n-tiles, one P V k-slice
constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float QuadMax(float v) {
  v = fmaxf(v, __shfl_xor_sync(kFull, v, 1));
  return fmaxf(v, __shfl_xor_sync(kFull, v, 2));
}

__device__ __forceinline__ float QuadSum(float v) {
  v += __shfl_xor_sync(kFull, v, 1);
  return v + __shfl_xor_sync(kFull, v, 2);
}

__device__ __forceinline__ void Words(const uint4& v, uint32_t* w) {
  w[0] = v.x;
  w[1] = v.y;
  w[2] = v.z;
  w[3] = v.w;
}

template <int D>
struct MmaCfg {
  static constexpr int kQChunks = D / 32;  // 16-byte loads of a key (and q) row per lane
  static constexpr int kSlices = D / 16;   // k-slices of the score mma
  static constexpr int kTiles = D / 8;     // n-tiles of the output
  static constexpr int kVWords = D / 16;   // 32-bit words of a value row per lane (D / 8 dims)
  static constexpr int kStride = D + 4;    // shared row of a warp's partial output, padded
  // Where dimension d of a row lives in that row: one float of padding per
  // lane quarter (2 D / 8 dims), so the 32 lanes' stores hit 32 banks.
  __device__ static int Col(int d) { return d + d / (2 * kTiles); }
};

// kCluster: a clustered plan (PagedAttnArgs::cluster).
template <int D, bool kCluster>
__global__ void __launch_bounds__(kThreads, 2) PagedMmaKernel(const PagedAttnArgs a) {
  LetDependentsLaunch();  // the kernel after it may start (a decode GEMV loads its weights)
  // A clustered plan reads, until its WaitForPriorKernels below, only what
  // no kernel still running writes (paged_attention_cuda.h): the metadata,
  // and the keys and values before the sequence's new tokens. Otherwise
  // the kernel before (which wrote q and the new keys) comes first.
  if constexpr (!kCluster) WaitForPriorKernels();
  using C = MmaCfg<D>;
  __shared__ float o_s[kWarps][kRows][C::kStride];
  __shared__ float m_s[kWarps][kRows], l_s[kWarps][kRows];
  __shared__ std::conditional_t<kCluster, PagedClusterRows<D, kRows>, char> part_s;  // the split's partial

  const int h = blockIdx.x, b = blockIdx.y, split = blockIdx.z, tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4;
  const int q0 = a.q_starts[b], q1 = a.q_starts[b + 1];
  if (!PagedRowsValid(q0, q1, a.T)) return;  // rows unknown: skipped
  const int q_len = q1 - q0, ctx = a.context_lens[b];
  const int G = a.Hq / a.Hkv, R = q_len * G;
  const int nsplit = PagedSeqSplits(q_len, ctx, a.capacity, a.num_splits, a.min_split_tokens);
  if (nsplit == 0 || (kCluster && R > kPagedClusterMaxRows)) {  // unusable lengths, or more rows than promised
    WaitForPriorKernels();  // (a second wait returns at once)
    PagedNanRows<D>(a, q0, h, G, R, tid, kThreads);
    return;
  }
  if (!kCluster && split >= nsplit) return;  // (in a cluster an empty split still takes part in the merge)
  const int split_len = PagedSplitLen(ctx, a.num_splits, a.min_split_tokens);
  // (In a cluster, a split past the sequence's own starts at ctx: empty.)
  const int kv_begin = kCluster ? static_cast<int>(min(int64_t{split} * split_len, int64_t{ctx})) : split * split_len;
  const int kv_end = min(kv_begin + split_len, ctx);
  const int old_end = ctx - q_len;  // keys before the new tokens
  const int32_t* table = a.block_table + static_cast<int64_t>(b) * a.max_blocks_per_seq;
  const int bs_log2 = a.block_size_log2, bs_mask = (1 << bs_log2) - 1;
  // Key chunks start at multiples of 16 (kv_begin is a multiple of 64), so
  // with blocks of at least 16 tokens a chunk lies in one block.
  const bool chunk_in_one_block = bs_log2 >= 4;
  const int first_k0 = kv_begin + warp * kKeys;

  bool bad = false;
  uint4 kr[2][C::kQChunks];       // K: keys g and 8 + g of the warp's chunk
  uint32_t vw[4][C::kVWords];     // V: keys 2c, 2c+1, 2c+8, 2c+9
  // Loads the chunk at k0 (block id chunk_id when it lies in one block):
  // the keys in [lo, hi), hi <= kv_end; the others keep their registers
  // when `keep`, else become zero. A block id out of range marks the
  // sequence bad.
  auto load = [&](int k0, int chunk_id, int lo, int hi, bool keep) {
    auto row_of = [&](int t) -> int64_t {  // the pool offset of key t's row for kv head h, or -1: not loaded
      if (t < lo || t >= hi) return -1;
      const int id = chunk_in_one_block ? chunk_id : table[t >> bs_log2];
      if (id < 0 || id >= a.num_blocks) {
        bad = true;
        return -1;
      }
      return (((static_cast<int64_t>(id) << bs_log2) + (t & bs_mask)) * a.Hkv + h) * D;
    };
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      const int64_t off = row_of(k0 + 8 * n + g);
#pragma unroll
      for (int j = 0; j < C::kQChunks; ++j) {
        if (off >= 0) kr[n][j] = __ldg(reinterpret_cast<const uint4*>(a.key_blocks + off + 32 * j + 8 * c));
        else if (!keep) kr[n][j] = make_uint4(0u, 0u, 0u, 0u);
      }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t off = row_of(k0 + 2 * c + (i & 1) + 8 * (i >> 1));
#pragma unroll
      for (int v = 0; v < C::kVWords / 4; ++v) {
        const uint4* src = reinterpret_cast<const uint4*>(a.value_blocks + off + g * (D / 8) + 8 * v);
        if (off >= 0) Words(__ldg(src), &vw[i][4 * v]);
        else if (!keep) Words(make_uint4(0u, 0u, 0u, 0u), &vw[i][4 * v]);
      }
    }
  };
  // With blocks of >= 16 tokens, lane i holds the block id of the warp's
  // chunk `it + i` (loaded 32 at a time, passed round by shuffles).
  int ids = 0;
  auto load_ids = [&](int k0) {
    const int64_t kl = k0 + int64_t{lane} * kWarps * kKeys;
    ids = kl < kv_end ? table[kl >> bs_log2] : 0;
  };
  // A clustered plan: the first chunk's old keys while the kernels before
  // finish; then q and the new keys.
  const int early_end = kCluster ? min(old_end, kv_end) : 0;  // keys [0, early_end) loaded before the wait
  if constexpr (kCluster) {
    if (chunk_in_one_block) load_ids(first_k0);
    if (first_k0 < kv_end) load(first_k0, __shfl_sync(kFull, ids, 0), 0, early_end, /*keep=*/false);
    WaitForPriorKernels();  // the kernel before wrote q and the new keys
  }

  for (int base = 0; base < R; base += kRows) {
    // q's A fragments for rows base + g and base + g + 8 (zero past R).
    uint32_t qf[C::kSlices][4];
    const int r_lo = base + g, r_hi = base + g + 8;
#pragma unroll
    for (int j = 0; j < C::kQChunks; ++j) {
      uint4 lo = make_uint4(0u, 0u, 0u, 0u), hi = lo;
      if (r_lo < R) lo = __ldg(reinterpret_cast<const uint4*>(a.q + PagedOutRow(a, q0, h, G, r_lo) * D + 32 * j + 8 * c));
      if (r_hi < R) hi = __ldg(reinterpret_cast<const uint4*>(a.q + PagedOutRow(a, q0, h, G, r_hi) * D + 32 * j + 8 * c));
      qf[2 * j][0] = lo.x;
      qf[2 * j][1] = hi.x;
      qf[2 * j][2] = lo.y;
      qf[2 * j][3] = hi.y;
      qf[2 * j + 1][0] = lo.z;
      qf[2 * j + 1][1] = hi.z;
      qf[2 * j + 1][2] = lo.w;
      qf[2 * j + 1][3] = hi.w;
    }
    const int lim_lo = r_lo < R ? min(PagedVisibleKeys(ctx, q_len, r_lo / G), kv_end) : 0;
    const int lim_hi = r_hi < R ? min(PagedVisibleKeys(ctx, q_len, r_hi / G), kv_end) : 0;
    float o[C::kTiles][4];
#pragma unroll
    for (int t = 0; t < C::kTiles; ++t) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.f;
    float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.f, l_hi = 0.f;

    for (int k0 = first_k0, it = 0; k0 < kv_end; k0 += kWarps * kKeys, ++it) {
      const bool early = kCluster && base == 0 && it == 0;  // keys before early_end are in kr and vw
      if (chunk_in_one_block && it % 32 == 0 && !early) load_ids(k0);
      const int chunk_id = __shfl_sync(kFull, ids, it % 32);
      load(k0, chunk_id, early ? early_end : 0, kv_end, /*keep=*/early);

      // Scores: s[n] holds (row g, keys 8n + 2c, +1) and (row g + 8, the same keys).
      float s[2][4];
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
        for (int j = 0; j < C::kQChunks; ++j) {
          Mma16816(s[n], qf[2 * j], kr[n][j].x, kr[n][j].y);
          Mma16816(s[n], qf[2 * j + 1], kr[n][j].z, kr[n][j].w);
        }
      }
      // Mask, scale to log2 units, and the online softmax of both rows.
      float mx_lo = -INFINITY, mx_hi = -INFINITY;
#pragma unroll
      for (int n = 0; n < 2; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = k0 + 8 * n + 2 * c + (e & 1);
          s[n][e] = key < (e < 2 ? lim_lo : lim_hi) ? s[n][e] * a.scale_log2 : -INFINITY;
        }
        mx_lo = fmaxf(mx_lo, fmaxf(s[n][0], s[n][1]));
        mx_hi = fmaxf(mx_hi, fmaxf(s[n][2], s[n][3]));
      }
      const float mn_lo = fmaxf(m_lo, QuadMax(mx_lo)), mn_hi = fmaxf(m_hi, QuadMax(mx_hi));
      const float al_lo = PagedScale(m_lo, mn_lo), al_hi = PagedScale(m_hi, mn_hi);
      m_lo = mn_lo;
      m_hi = mn_hi;
      l_lo *= al_lo;
      l_hi *= al_hi;
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        s[n][0] = PagedScale(s[n][0], mn_lo);
        s[n][1] = PagedScale(s[n][1], mn_lo);
        s[n][2] = PagedScale(s[n][2], mn_hi);
        s[n][3] = PagedScale(s[n][3], mn_hi);
        l_lo += s[n][0] + s[n][1];
        l_hi += s[n][2] + s[n][3];
      }
      const uint32_t pa[4] = {PackBf16(s[0][0], s[0][1]), PackBf16(s[0][2], s[0][3]), PackBf16(s[1][0], s[1][1]),
                              PackBf16(s[1][2], s[1][3])};
      // O += P V; n-tile t reads dimension g D/8 + t of the four keys.
#pragma unroll
      for (int t = 0; t < C::kTiles; ++t) {
        o[t][0] *= al_lo;
        o[t][1] *= al_lo;
        o[t][2] *= al_hi;
        o[t][3] *= al_hi;
        const uint32_t sel = t % 2 ? 0x7632u : 0x5410u;  // high or low halves of the two words
        const int w = t / 2;
        Mma16816(o[t], pa, __byte_perm(vw[0][w], vw[1][w], sel), __byte_perm(vw[2][w], vw[3][w], sel));
      }
    }

    // The warp's partial rows into shared memory (lane sums of l first).
    l_lo = QuadSum(l_lo);
    l_hi = QuadSum(l_hi);
#pragma unroll
    for (int t = 0; t < C::kTiles; ++t) {
      const int d0 = 2 * c * C::kTiles + t, d1 = d0 + C::kTiles;
      o_s[warp][g][C::Col(d0)] = o[t][0];
      o_s[warp][g][C::Col(d1)] = o[t][1];
      o_s[warp][g + 8][C::Col(d0)] = o[t][2];
      o_s[warp][g + 8][C::Col(d1)] = o[t][3];
    }
    if (c == 0) {
      m_s[warp][g] = m_lo;
      l_s[warp][g] = l_lo;
      m_s[warp][g + 8] = m_hi;
      l_s[warp][g + 8] = l_hi;
    }
    bad = __syncthreads_or(bad) != 0;
    // Then the warps; thread (row, d) merges the element, and writes it (or
    // puts it in the block's partial, for the cluster merge).
    for (int i = tid; i < kRows * D; i += kThreads) {
      const int r = i / D, d = i % D, rr = base + r;
      if (rr >= R) break;  // rows past R come last
      const PagedPartial m = PagedMergeWarps<kWarps>([&](int w) {
        return PagedPartial{o_s[w][r][C::Col(d)], l_s[w][r], m_s[w][r]};
      });
      if constexpr (kCluster) PagedClusterPut<D, kRows>(part_s, r, d, bad, m.o, m.l, m.m);
      else PagedStore<D>(a, PagedOutRow(a, q0, h, G, rr), split, d, bad, m.o, m.l, m.m);
    }
    __syncthreads();  // the next row group rewrites o_s, m_s, l_s
  }
  if constexpr (kCluster) PagedClusterMerge<D, kRows>(a, part_s, q0, h, G, R, tid, kThreads);  // R <= kRows here
}

template <int D>
cudaError_t Launch(const PagedAttnArgs& a, cudaStream_t s) {
  const dim3 grid(a.Hkv, a.B, a.num_splits);
  if (!a.cluster) return LaunchDependent(&PagedMmaKernel<D, false>, grid, dim3(kThreads), 0, s, a);
  return LaunchDependentInClusters(&PagedMmaKernel<D, true>, grid, dim3(kThreads), dim3(1, 1, a.num_splits), 0, s, a);
}

}  // namespace

cudaError_t LaunchPagedMmaKernel(const PagedAttnArgs& a, cudaStream_t s) {
  if (a.D == 128) return Launch<128>(a, s);
#ifndef TANDEM_CUDA_CI_SUBSET
  if (a.D == 64) return Launch<64>(a, s);
#endif
  return cudaErrorInvalidValue;
}

}  // namespace tandem::kernels::detail
