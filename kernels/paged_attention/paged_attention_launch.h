// Internal: the paged attention kernels' arguments and launchers
// (paged_attention.cu), plain types; checks and the plan live in
// paged_attention_cuda.cc.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::kernels::detail {

struct PagedAttnArgs {
  const __nv_bfloat16* q = nullptr;
  const __nv_bfloat16* key_blocks = nullptr;
  const __nv_bfloat16* value_blocks = nullptr;
  const int32_t* block_table = nullptr;
  const int32_t* context_lens = nullptr;
  const int32_t* q_starts = nullptr;
  __nv_bfloat16* out = nullptr;
  float* part_o = nullptr;    // [T * Hq, num_splits, D] when num_splits > 1
  float* part_lse = nullptr;  // [T * Hq, num_splits], log2 units
  int32_t B = 0, T = 0, Hq = 0, Hkv = 0, D = 0;
  int32_t num_blocks = 0, block_size_log2 = 0, max_blocks_per_seq = 0;
  int64_t capacity = 0;
  int32_t num_splits = 1, min_split_tokens = 64;  // the plan (paged_attention.h)
  bool cluster = false;  // the splits merge in their cluster (num_splits > 1; no part_o, no combine)
  float scale_log2 = 0.f;  // softmax scale * log2(e): scores in log2 units
  int32_t max_rows = 0;    // an upper bound on q_len * Hq / Hkv over the sequences
};

// The most rows per kv head (max_rows) the warps kernel holds.
inline constexpr int32_t kPagedWarpsMaxRows = 4;
// The most rows per kv head a clustered plan takes (the mma kernel's one
// row group, whose partial each block keeps in shared memory).
inline constexpr int32_t kPagedClusterMaxRows = 16;

// The kernels that walk the keys (paged_attention_cuda.h, PagedKernel).
enum class PagedImpl { kTiles, kWarps, kMma };

// The attention kernel `impl` and, with num_splits > 1 and no cluster, the
// combine, for D in {64, 128}; cudaErrorInvalidValue for another D, for
// kWarps with max_rows > kPagedWarpsMaxRows, or for a cluster with kTiles or
// max_rows > kPagedClusterMaxRows.
cudaError_t LaunchPagedAttention(const PagedAttnArgs& a, PagedImpl impl, cudaStream_t s);
// The warps kernel alone (paged_attention_warps.cu).
cudaError_t LaunchPagedWarpsKernel(const PagedAttnArgs& a, cudaStream_t s);
// The mma kernel alone (paged_attention_mma.cu).
cudaError_t LaunchPagedMmaKernel(const PagedAttnArgs& a, cudaStream_t s);

cudaError_t LaunchPagedKvWrite(int64_t num_tokens, int32_t row_elems, int64_t num_slots, const __nv_bfloat16* k,
                               const __nv_bfloat16* v, const int64_t* slot_mapping, __nv_bfloat16* key_blocks,
                               __nv_bfloat16* value_blocks, cudaStream_t s);

}  // namespace tandem::kernels::detail
