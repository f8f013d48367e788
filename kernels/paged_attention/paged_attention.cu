// Paged decode attention (paged_attention_cuda.h): the tiles kernel, the
// split combine the three kernels share, the slot write, and the launcher
// that runs the tiles, the warps (paged_attention_warps.cu) or the mma
// kernel (paged_attention_mma.cu).
// Tiles: one block of 128 threads per (kv head, sequence, split). The rows of a block are the
// sequence's new tokens times the Hq / Hkv query heads sharing the kv head,
// RT at a time (q in shared memory as fp32, pre-scaled to log2 units).
// Keys and values stream through two shared-memory stages of kTile keys
// (cp.async, zero-filled past the split's end); per tile:
//   scores: thread (key, row group) dots its key row with its rows' q;
//           masked to each row's visible keys;
//   softmax: one warp per row: tile max, running max, p = 2^(s - m), sums;
//   PV:     thread (column d, row group) accumulates p * v in registers,
//           rescaled by 2^(m_old - m_new).
// Shared-memory rows are padded by 16 bytes so the 16-byte key loads of
// consecutive keys fall in distinct banks. With one split the block writes
// bf16 out; with several it writes fp32 partials and their lse (log2), and
// the combine kernel (one warp per output row) merges them.
#include "kernels/common/device_math.cuh"
#include "kernels/paged_attention/paged_attention_common.cuh"
#include "kernels/paged_attention/paged_attention_rules.h"
#include "kernels/tree_attention/mma_sm80.cuh"  // cp.async helpers

namespace tandem::kernels::detail {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;

template <int D>
struct Cfg {
  static constexpr int kTile = D == 64 ? 64 : 32;        // keys per stage (divides kPagedTileTokens = 64)
  static constexpr int kStride = D + 8;                  // shared row stride in bf16 (16 bytes of padding)
  static constexpr int kChunks = D / 8;                  // 16-byte chunks per key row
  static constexpr int kScoreGroups = kThreads / kTile;  // row groups in the score phase
  static constexpr int kPvGroups = kThreads / D;         // row groups in the PV phase
};

template <int D, int RT>
__global__ void __launch_bounds__(kThreads) PagedAttentionKernel(const PagedAttnArgs a) {
  LetDependentsLaunch();  // the kernel after it may start (a decode GEMV loads its weights)
  WaitForPriorKernels();  // a dependent launch: the kernel before it wrote q and the new keys
  using C = Cfg<D>;
  constexpr int TT = C::kTile, S = C::kStride;
  constexpr int kRowsScore = RT / C::kScoreGroups;
  constexpr int kRowsPv = RT / C::kPvGroups;
  static_assert(RT % C::kScoreGroups == 0 && RT % C::kPvGroups == 0, "row tile must split over the groups");
  static_assert(TT % 4 == 0 && 64 % TT == 0, "key tiles must divide the split granularity");
  __shared__ __align__(16) __nv_bfloat16 ks[2][TT * S];
  __shared__ __align__(16) __nv_bfloat16 vs[2][TT * S];
  __shared__ __align__(16) float qs[RT * D];
  __shared__ __align__(16) float ps[RT * TT];
  __shared__ float m_s[RT], l_s[RT], alpha_s[RT];
  __shared__ int bad_s;

  const int h = blockIdx.x, b = blockIdx.y, split = blockIdx.z, tid = threadIdx.x;
  const int q0 = a.q_starts[b], q1 = a.q_starts[b + 1];
  if (!PagedRowsValid(q0, q1, a.T)) return;  // rows unknown: skipped
  const int q_len = q1 - q0, ctx = a.context_lens[b];
  const int G = a.Hq / a.Hkv, R = q_len * G;
  const int nsplit = PagedSeqSplits(q_len, ctx, a.capacity, a.num_splits, a.min_split_tokens);
  if (nsplit == 0) {  // unusable lengths: NaN rows (the combine writes them when split)
    PagedNanRows<D>(a, q0, h, G, R, tid, kThreads);
    return;
  }
  if (split >= nsplit) return;
  const int split_len = PagedSplitLen(ctx, a.num_splits, a.min_split_tokens);
  const int kv_begin = split * split_len, kv_end = min(kv_begin + split_len, ctx);
  const int ntiles = (kv_end - kv_begin + TT - 1) / TT;
  const int32_t* table = a.block_table + static_cast<int64_t>(b) * a.max_blocks_per_seq;
  const int bs_log2 = a.block_size_log2, bs_mask = (1 << bs_log2) - 1;
  if (tid == 0) bad_s = 0;
  __syncthreads();

  // Tile `tile` of this split into stage `stage` (K and V, zero past kv_end
  // or for a block id out of range, which marks the sequence bad).
  auto load_tile = [&](int tile, int stage) {
    const int t0 = kv_begin + tile * TT;
    for (int c = tid; c < TT * C::kChunks; c += kThreads) {
      const int tok = c / C::kChunks, part = c % C::kChunks, t = t0 + tok;
      const __nv_bfloat16* ksrc = a.key_blocks;
      const __nv_bfloat16* vsrc = a.value_blocks;
      bool valid = t < kv_end;
      if (valid) {
        const int blk = table[t >> bs_log2];
        if (blk < 0 || blk >= a.num_blocks) {
          bad_s = 1;
          valid = false;
        } else {
          const int64_t off =
              (((static_cast<int64_t>(blk) << bs_log2) + (t & bs_mask)) * a.Hkv + h) * D + part * 8;
          ksrc += off;
          vsrc += off;
        }
      }
      CpAsync16(&ks[stage][tok * S + part * 8], ksrc, valid);
      CpAsync16(&vs[stage][tok * S + part * 8], vsrc, valid);
    }
  };

  for (int base = 0; base < R; base += RT) {
    // This row group's q (fp32, scale * log2 e folded in) and softmax state.
    for (int c = tid; c < RT * C::kChunks; c += kThreads) {
      const int r = c / C::kChunks, part = c % C::kChunks, rr = base + r;
      float f[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      if (rr < R) {
        const __nv_bfloat16* src = a.q + PagedOutRow(a, q0, h, G, rr) * D + part * 8;
        Bf16x8(*reinterpret_cast<const uint4*>(src), f);
      }
      float4* dst = reinterpret_cast<float4*>(&qs[r * D + part * 8]);
      dst[0] = make_float4(f[0] * a.scale_log2, f[1] * a.scale_log2, f[2] * a.scale_log2, f[3] * a.scale_log2);
      dst[1] = make_float4(f[4] * a.scale_log2, f[5] * a.scale_log2, f[6] * a.scale_log2, f[7] * a.scale_log2);
    }
    if (tid < RT) {
      m_s[tid] = -INFINITY;
      l_s[tid] = 0.f;
    }
    // Each score-phase thread's rows and how many keys each sees in this split.
    const int tok = tid % TT, rg = tid / TT;
    int limit[kRowsScore];
#pragma unroll
    for (int i = 0; i < kRowsScore; ++i) {
      const int rr = base + rg + i * C::kScoreGroups;
      limit[i] = rr < R ? min(PagedVisibleKeys(ctx, q_len, rr / G), kv_end) : 0;
    }
    const int d = tid % D, pg = tid / D;
    float acc[kRowsPv];
#pragma unroll
    for (int i = 0; i < kRowsPv; ++i) acc[i] = 0.f;

    load_tile(0, 0);
    CpAsyncCommit();
    for (int it = 0; it < ntiles; ++it) {
      const int stage = it & 1;
      if (it + 1 < ntiles) {
        load_tile(it + 1, stage ^ 1);
        CpAsyncCommit();
        CpAsyncWait<1>();
      } else {
        CpAsyncWait<0>();
      }
      __syncthreads();
      {  // scores
        float s[kRowsScore];
#pragma unroll
        for (int i = 0; i < kRowsScore; ++i) s[i] = 0.f;
        const __nv_bfloat16* krow = &ks[stage][tok * S];
#pragma unroll
        for (int d0 = 0; d0 < D; d0 += 8) {
          float kf[8];
          Bf16x8(*reinterpret_cast<const uint4*>(krow + d0), kf);
#pragma unroll
          for (int i = 0; i < kRowsScore; ++i) {
            const float* qr = &qs[(rg + i * C::kScoreGroups) * D + d0];
            const float4 x = *reinterpret_cast<const float4*>(qr);
            const float4 y = *reinterpret_cast<const float4*>(qr + 4);
            s[i] += x.x * kf[0] + x.y * kf[1] + x.z * kf[2] + x.w * kf[3] + y.x * kf[4] + y.y * kf[5] +
                    y.z * kf[6] + y.w * kf[7];
          }
        }
        const int t = kv_begin + it * TT + tok;
#pragma unroll
        for (int i = 0; i < kRowsScore; ++i) ps[(rg + i * C::kScoreGroups) * TT + tok] = t < limit[i] ? s[i] : -INFINITY;
      }
      __syncthreads();
      {  // online softmax, one warp per row
        const int warp = tid / 32, lane = tid % 32;
        for (int r = warp; r < RT; r += kWarps) {
          float* pr = &ps[r * TT];
          float mx = -INFINITY;
          for (int t = lane; t < TT; t += 32) mx = fmaxf(mx, pr[t]);
          mx = WarpMax(mx);
          const float m_old = m_s[r], m_new = fmaxf(m_old, mx);
          float sum = 0.f;
          for (int t = lane; t < TT; t += 32) {
            const float p = m_new == -INFINITY ? 0.f : exp2f(pr[t] - m_new);
            pr[t] = p;
            sum += p;
          }
          sum = WarpSum(sum);
          if (lane == 0) {
            const float alpha = m_new == -INFINITY ? 1.f : exp2f(m_old - m_new);
            alpha_s[r] = alpha;
            m_s[r] = m_new;
            l_s[r] = l_s[r] * alpha + sum;
          }
        }
      }
      __syncthreads();
      {  // PV
        const __nv_bfloat16* vcol = &vs[stage][d];
#pragma unroll
        for (int i = 0; i < kRowsPv; ++i) acc[i] *= alpha_s[pg + i * C::kPvGroups];
#pragma unroll 2
        for (int t = 0; t < TT; t += 4) {
          const float v0 = __bfloat162float(vcol[(t + 0) * S]), v1 = __bfloat162float(vcol[(t + 1) * S]);
          const float v2 = __bfloat162float(vcol[(t + 2) * S]), v3 = __bfloat162float(vcol[(t + 3) * S]);
#pragma unroll
          for (int i = 0; i < kRowsPv; ++i) {
            const float4 p = *reinterpret_cast<const float4*>(&ps[(pg + i * C::kPvGroups) * TT + t]);
            acc[i] += p.x * v0 + p.y * v1 + p.z * v2 + p.w * v3;
          }
        }
      }
      __syncthreads();
    }

    const bool bad = bad_s != 0;
#pragma unroll
    for (int i = 0; i < kRowsPv; ++i) {
      const int r = pg + i * C::kPvGroups, rr = base + r;
      if (rr < R) PagedStore<D>(a, PagedOutRow(a, q0, h, G, rr), split, d, bad, acc[i], l_s[r], m_s[r]);
    }
    __syncthreads();  // the next row group rewrites qs, m_s, l_s
  }
}

// One warp per output row (token * Hq + head): out = sum_s 2^(lse_s - max) o_s / sum_s 2^(lse_s - max).
template <int D>
__global__ void __launch_bounds__(kThreads) PagedCombineKernel(const PagedAttnArgs a) {
  LetDependentsLaunch();  // the kernel after it may start (a decode GEMV loads its weights)
  WaitForPriorKernels();  // a dependent launch: the split kernel before it wrote the partials
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (row >= static_cast<int64_t>(a.T) * a.Hq) return;
  const int t = static_cast<int>(row / a.Hq);
  int lo = 0, hi = a.B - 1;  // the last sequence starting at or before t
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (a.q_starts[mid] <= t) lo = mid;
    else hi = mid - 1;
  }
  const int q0 = a.q_starts[lo], q1 = a.q_starts[lo + 1];
  if (!PagedRowsValid(q0, q1, a.T) || t < q0 || t >= q1) return;  // skipped, as by the attention kernel
  const int nsplit = PagedSeqSplits(q1 - q0, a.context_lens[lo], a.capacity, a.num_splits, a.min_split_tokens);
  __nv_bfloat16* dst = a.out + row * D;
  const float* lse = a.part_lse + row * a.num_splits;
  float mx = -INFINITY;
  bool bad = nsplit == 0;
  for (int s = lane; s < nsplit; s += 32) {
    mx = fmaxf(mx, lse[s]);
    bad = bad || isnan(lse[s]);
  }
  mx = WarpMax(mx);
  bad = __any_sync(0xffffffffu, bad) || mx == -INFINITY;
  constexpr int kCols = D / 32;
  float o[kCols];
#pragma unroll
  for (int k = 0; k < kCols; ++k) o[k] = 0.f;
  float wsum = 0.f;
  if (!bad) {
    for (int s = 0; s < nsplit; ++s) {
      const float w = exp2f(lse[s] - mx);
      const float* po = a.part_o + (row * a.num_splits + s) * D;
      wsum += w;
#pragma unroll
      for (int k = 0; k < kCols; ++k) o[k] += w * po[lane + 32 * k];
    }
  }
#pragma unroll
  for (int k = 0; k < kCols; ++k) dst[lane + 32 * k] = __float2bfloat16(bad ? PagedNan() : o[k] / wsum);
}

__global__ void __launch_bounds__(kThreads)
    PagedKvWriteKernel(int32_t row_elems, int64_t num_slots, const __nv_bfloat16* k, const __nv_bfloat16* v,
                       const int64_t* slot_mapping, __nv_bfloat16* key_blocks, __nv_bfloat16* value_blocks) {
  const int64_t t = blockIdx.x;
  const int64_t slot = slot_mapping[t];
  if (slot < 0 || slot >= num_slots) return;
  const int chunks = row_elems / 8;
  const uint4* ks = reinterpret_cast<const uint4*>(k + t * row_elems);
  const uint4* vsrc = reinterpret_cast<const uint4*>(v + t * row_elems);
  uint4* kd = reinterpret_cast<uint4*>(key_blocks + slot * row_elems);
  uint4* vd = reinterpret_cast<uint4*>(value_blocks + slot * row_elems);
  for (int c = threadIdx.x; c < chunks; c += kThreads) {
    kd[c] = ks[c];
    vd[c] = vsrc[c];
  }
}

template <int D, int RT>
cudaError_t Launch(const PagedAttnArgs& a, cudaStream_t s) {
  return LaunchDependent(&PagedAttentionKernel<D, RT>, dim3(a.Hkv, a.B, a.num_splits), dim3(kThreads), 0, s, a);
}

template <int D>
cudaError_t LaunchTiles(const PagedAttnArgs& a, cudaStream_t s) {
  if (a.max_rows <= 4) return Launch<D, 4>(a, s);
  if (a.max_rows <= 8) return Launch<D, 8>(a, s);
  return Launch<D, 16>(a, s);
}

template <int D>
cudaError_t LaunchCombine(const PagedAttnArgs& a, cudaStream_t s) {
  const int64_t rows = static_cast<int64_t>(a.T) * a.Hq;
  return LaunchDependent(&PagedCombineKernel<D>, dim3(static_cast<unsigned>((rows + kWarps - 1) / kWarps)),
                         dim3(kThreads), 0, s, a);
}

}  // namespace

cudaError_t LaunchPagedAttention(const PagedAttnArgs& a, PagedImpl impl, cudaStream_t s) {
  if (impl == PagedImpl::kWarps && a.max_rows > kPagedWarpsMaxRows) return cudaErrorInvalidValue;
  if (a.cluster && (impl == PagedImpl::kTiles || a.max_rows > kPagedClusterMaxRows)) return cudaErrorInvalidValue;
  cudaError_t e = cudaErrorInvalidValue;
  if (impl == PagedImpl::kWarps) e = LaunchPagedWarpsKernel(a, s);
  if (impl == PagedImpl::kMma) e = LaunchPagedMmaKernel(a, s);
  if (impl == PagedImpl::kTiles && a.D == 128) e = LaunchTiles<128>(a, s);
#ifndef TANDEM_CUDA_CI_SUBSET
  if (impl == PagedImpl::kTiles && a.D == 64) e = LaunchTiles<64>(a, s);
#endif
  if (e != cudaSuccess || a.num_splits == 1 || a.cluster) return e;
  return a.D == 128 ? LaunchCombine<128>(a, s) : LaunchCombine<64>(a, s);
}

cudaError_t LaunchPagedKvWrite(int64_t num_tokens, int32_t row_elems, int64_t num_slots, const __nv_bfloat16* k,
                               const __nv_bfloat16* v, const int64_t* slot_mapping, __nv_bfloat16* key_blocks,
                               __nv_bfloat16* value_blocks, cudaStream_t s) {
  if (num_tokens == 0) return cudaSuccess;
  PagedKvWriteKernel<<<static_cast<unsigned>(num_tokens), kThreads, 0, s>>>(row_elems, num_slots, k, v, slot_mapping,
                                                                          key_blocks, value_blocks);
  return cudaGetLastError();
}

}  // namespace tandem::kernels::detail
