// Paged decode attention (issue #14, item 5 "Kernels"; docs/inference.md
// "Paged attention"): the new tokens of B sequences attend, with GQA, to
// their keys and values held in a block pool through per-sequence block
// tables, and the K/V write of the new tokens into their slots. CPU oracle
// (fp64) and CPU implementation (fp32) here; CUDA (bf16) in
// paged_attention_cuda.h. No LibTorch.
//
// Layout (exactly workers/model/paged_kv.h's, row-major):
//   key_blocks, value_blocks [num_blocks, block_size, Hkv, D]: token t of
//     sequence b lives in block block_table[b * max_blocks_per_seq +
//     t / block_size] at offset t % block_size (block_size a power of two);
//   q, out [T, Hq, D]: the T new tokens, packed sequence by sequence;
//   q_starts [B + 1] int32: sequence b's new tokens are rows
//     [q_starts[b], q_starts[b + 1]) (q_lens[b] = their count, >= 1;
//     q_starts[0] = 0, q_starts[B] = T);
//   context_lens [B] int32: keys of sequence b after this step's writes,
//     q_lens[b] <= context_lens[b] <= max_blocks_per_seq * block_size.
// Head h of new token j of sequence b uses kv head h / (Hq / Hkv) and sees
// the first context_lens[b] - q_lens[b] + j + 1 keys (its past, the new
// tokens before it, itself):
//   out = softmax(scale * q . K^T) V over those keys, fp32 accumulation.
// Block table entries past a sequence's last block are never read.
//
// Split-K: a PagedAttentionPlan gives at most num_splits splits per
// sequence; sequence b's keys are cut into splits of L = max(min_split_tokens,
// ceil(context_lens[b] / num_splits) rounded up to a multiple of 64) keys, so
// that short and long sequences alike use all their splits (the rule is
// applied to the device's context_lens, so a captured CUDA graph stays
// valid as sequences grow). Each split yields a partial (max-shifted output,
// log-sum-exp) and a combine pass merges them: out = sum_s exp(lse_s - lse)
// o_s with lse = log sum_s exp(lse_s). The CPU implementation follows the
// same plan, so the CPU tests cover the combine the GPU runs. On CUDA the
// merge is either a combine kernel over partials in a workspace, or (a
// clustered plan) done by the splits themselves: the splits of a
// (sequence, kv head) run as one thread-block cluster and merge in
// distributed shared memory, no workspace and no second kernel.
//
// Slot write: for new token t with slot = slot_mapping[t] (int64, = block *
// block_size + offset) >= 0, key_blocks/value_blocks viewed as
// [num_blocks * block_size, Hkv, D] get row slot = k[t] / v[t]; a negative
// slot is skipped (a padded row).
#pragma once

#include <cstdint>

#include "common/status.h"

namespace tandem::kernels {

struct PagedAttentionShape {
  int32_t num_seqs = 0;            // B
  int32_t num_tokens = 0;          // T (sum of q_lens)
  int32_t num_heads = 0;           // Hq, a multiple of Hkv
  int32_t num_kv_heads = 0;        // Hkv
  int32_t head_dim = 0;            // D
  int32_t num_blocks = 0;          // blocks in each pool
  int32_t block_size = 0;          // tokens per block, a power of two
  int32_t max_blocks_per_seq = 0;  // block_table row length
  float scale = 0.f;               // softmax scale, finite and > 0

  int64_t capacity() const { return int64_t{max_blocks_per_seq} * block_size; }
};

inline constexpr int32_t kPagedTileTokens = 64;  // split granularity (the CUDA kernels' key tiles divide it)
inline constexpr int32_t kPagedMinSplitTokens = 128;
inline constexpr int32_t kPagedMaxSplits = 64;
inline constexpr int32_t kPagedMaxClusterSplits = 8;  // a portable thread-block cluster

// How the keys are split (above). min_split_tokens is a positive multiple
// of kPagedTileTokens; num_splits == 1: one split per sequence, no combine
// pass. cluster (CUDA; the CPU merges alike either way): the splits merge
// in a thread-block cluster instead of a combine kernel, num_splits at most
// kPagedMaxClusterSplits.
struct PagedAttentionPlan {
  int32_t num_splits = 1;
  int32_t min_split_tokens = kPagedTileTokens;
  bool cluster = false;
};

// Positive sizes (B >= 1, T >= B), Hq % Hkv == 0, block_size a power of two,
// scale finite and > 0. D any positive size here; CUDA adds its own limits.
Status CheckPagedAttentionShape(const PagedAttentionShape& s);
// The host copies of the metadata: q_starts as described, context_lens in
// [q_len, capacity], and every block table entry a sequence reads in
// [0, num_blocks). Names the sequence and the value on failure.
Status CheckPagedAttentionMetadata(const PagedAttentionShape& s, const int32_t* block_table,
                                   const int32_t* context_lens, const int32_t* q_starts);

// The split plan for `s` on a device of `num_sms` multiprocessors: enough
// splits that B * Hkv * num_splits gives about four blocks per
// multiprocessor, at most kPagedMaxSplits and at most capacity /
// min_split_tokens, each at least min_split_tokens keys (a multiple of
// kPagedTileTokens). Shapes only, so a captured CUDA graph stays valid.
// With `cluster`, at most kPagedMaxClusterSplits splits, merged in a
// cluster when there are several.
PagedAttentionPlan PlanPagedAttention(const PagedAttentionShape& s, int num_sms,
                                      int32_t min_split_tokens = kPagedMinSplitTokens, bool cluster = false);
// The plan without splits.
PagedAttentionPlan SingleSplitPlan();
Status CheckPagedAttentionPlan(const PagedAttentionPlan& plan);

// --- Oracle: each row on its own, the definition in fp64.
void PagedAttentionRef(const PagedAttentionShape& s, const float* q, const float* key_blocks,
                       const float* value_blocks, const int32_t* block_table, const int32_t* context_lens,
                       const int32_t* q_starts, float* out);

// --- CPU implementation: fp32, (sequence, kv head) pairs in parallel, the
// plan's splits and the log-sum-exp combine. Checks shape and metadata.
Status PagedAttentionCpu(const PagedAttentionShape& s, const PagedAttentionPlan& plan, const float* q,
                         const float* key_blocks, const float* value_blocks, const int32_t* block_table,
                         const int32_t* context_lens, const int32_t* q_starts, float* out, int threads = 0);

// --- Slot write.
struct PagedKvWriteShape {
  int32_t num_tokens = 0;    // T
  int32_t num_kv_heads = 0;  // Hkv
  int32_t head_dim = 0;      // D
  int64_t num_slots = 0;     // num_blocks * block_size
};
Status CheckPagedKvWriteShape(const PagedKvWriteShape& s);
// k, v [T, Hkv, D] into key_blocks/value_blocks at slot_mapping [T]. Every
// slot is checked (< num_slots) before anything is written; a negative slot
// is skipped.
Status PagedKvWriteCpu(const PagedKvWriteShape& s, const float* k, const float* v, const int64_t* slot_mapping,
                       float* key_blocks, float* value_blocks);

}  // namespace tandem::kernels
