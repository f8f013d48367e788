// Internal: the per-sequence rules of paged attention (paged_attention.h)
// that the CPU implementation and the CUDA kernels must apply alike, as
// inline functions for host and device: which keys a query row sees, how
// many splits a sequence has, and when its metadata is unusable.
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

// The sequence's non-empty splits; 0 when its lengths are unusable (q_len
// < 1, ctx < q_len or ctx > capacity): the CUDA kernels then write NaN rows.
TANDEM_PAGED_HD inline int32_t PagedSeqSplits(int32_t q_len, int32_t ctx, int64_t capacity, int32_t split_tokens) {
  if (q_len < 1 || ctx < q_len || static_cast<int64_t>(ctx) > capacity || split_tokens <= 0) return 0;
  return (ctx + split_tokens - 1) / split_tokens;
}

// q rows [q_begin, q_end) of a sequence lie inside [0, T) and are non-empty.
TANDEM_PAGED_HD inline bool PagedRowsValid(int32_t q_begin, int32_t q_end, int32_t num_tokens) {
  return q_begin >= 0 && q_end > q_begin && q_end <= num_tokens;
}

}  // namespace tandem::kernels::detail
