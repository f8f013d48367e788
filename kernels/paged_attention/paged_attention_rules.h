// Internal: the per-sequence rules of paged attention (paged_attention.h)
// that the CPU implementation and the CUDA kernels must apply alike, as
// inline functions for host and device: which keys a query row sees, how
// a sequence's keys are split, and when its metadata is unusable.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TANDEM_PAGED_HD __host__ __device__
#else
#define TANDEM_PAGED_HD
#endif

namespace tandem::kernels::detail {

// Keys seen by new token j (0-based) of a sequence with q_len new tokens
// and ctx keys: its past, the new tokens before it and itself.
TANDEM_PAGED_HD inline int32_t PagedVisibleKeys(int32_t ctx, int32_t q_len, int32_t j) { return ctx - q_len + j + 1; }

// The keys of one split of a sequence of ctx keys under a plan of
// num_splits splits of at least min_split keys: ctx spread evenly over the
// splits, rounded up to a multiple of 64 (kPagedTileTokens), and at least
// min_split (a multiple of 64 itself). So a sequence's splits follow its
// own length on the device, while the grid and workspace follow the plan.
TANDEM_PAGED_HD inline int32_t PagedSplitLen(int32_t ctx, int32_t num_splits, int32_t min_split) {
  const int64_t even = (int64_t{ctx} + num_splits - 1) / num_splits;
  const int64_t rounded = (even + 63) / 64 * 64, len = rounded > min_split ? rounded : min_split;
  return static_cast<int32_t>(len < INT32_MAX ? len : INT32_MAX);
}

// The sequence's non-empty splits (ceil(ctx / PagedSplitLen), at most
// num_splits); 0 when its lengths are unusable (q_len < 1, ctx < q_len or
// ctx > capacity): the CUDA kernels then write NaN rows.
TANDEM_PAGED_HD inline int32_t PagedSeqSplits(int32_t q_len, int32_t ctx, int64_t capacity, int32_t num_splits,
                                              int32_t min_split) {
  if (q_len < 1 || ctx < q_len || static_cast<int64_t>(ctx) > capacity || num_splits < 1 || min_split <= 0) return 0;
  const int64_t len = PagedSplitLen(ctx, num_splits, min_split);
  return static_cast<int32_t>((ctx + len - 1) / len);
}

// q rows [q_begin, q_end) of a sequence lie inside [0, T) and are non-empty.
TANDEM_PAGED_HD inline bool PagedRowsValid(int32_t q_begin, int32_t q_end, int32_t num_tokens) {
  return q_begin >= 0 && q_end > q_begin && q_end <= num_tokens;
}

}  // namespace tandem::kernels::detail
