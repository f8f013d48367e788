// Paged decode attention and the slot write on CUDA (issue #14; the math,
// layouts and plan in paged_attention.h): bf16 q, pools and out, fp32
// accumulation, head dim 64 or 128 (others are refused with
// InvalidArgument). Raw device pointers, shapes and a stream; no LibTorch.
//
// One block of 128 threads per (kv head, sequence, split) walks the
// split's keys for the rows of all Hq / Hkv query heads of all the
// sequence's new tokens (so K/V are read once per kv head and 16 rows, not
// once per query head), with an online softmax; PagedKernel below says how. With
// plan.num_splits > 1 each split writes an fp32 partial and its log-sum-exp
// into the workspace and a combine kernel writes `out`; with a clustered
// plan (plan.cluster) the splits of a (kv head, sequence) run as one
// thread-block cluster and merge in distributed shared memory instead (no
// workspace, no second kernel). The kernels are dependent launches
// (kernels/common/dependent_launch.cuh): each may start during the tail of
// the kernel before it and lets the kernel after it start as soon as its
// blocks run. Under a clustered plan (the latency-bound decode step's),
// the warps and mma kernels read, before waiting for the kernels before
// them, the metadata (block_table, context_lens, q_starts) and the keys and
// values before each sequence's new tokens (positions below context_len -
// q_len): the caller guarantees that no kernel still running when this one
// is launched writes those, and that an ordinary (not dependent) launch
// came between their writers and this chain of dependent launches
// (Transformer::DecodePaged computes q_starts before the embedding; the
// kernel just before writes only q and the new tokens' keys). Otherwise
// the kernels wait before reading anything.
//
// Device metadata is not trusted: a sequence whose lengths are unusable
// (q_len < 1, context_len outside [q_len, capacity]) or whose block table
// holds an id outside [0, num_blocks) gets NaN rows (no memory fault); a
// sequence whose q_starts range leaves [0, T) is skipped (its rows are not
// written). Every launcher checks its arguments and the launch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "kernels/paged_attention/paged_attention.h"

namespace tandem::kernels {

// The multiprocessor count of the current device (for PlanPagedAttention).
StatusOr<int> CurrentDeviceSmCount();

// Bytes of workspace for `plan` (0 when plan.num_splits == 1 or the plan
// is clustered):
// fp32 partials [T * Hq, num_splits, D] and their lse [T * Hq, num_splits].
size_t PagedAttentionWorkspaceBytes(const PagedAttentionShape& shape, const PagedAttentionPlan& plan);

// Which kernel walks the keys (docs/inference.md "The CUDA kernels"):
//   kTiles: the block's rows, 16 at a time, against key tiles
//           double-buffered in shared memory through cp.async, CUDA-core
//           arithmetic; any row count;
//   kWarps: the decode step's kernel (paged_attention_warps.cu): K/V read
//           straight into registers, keys dealt to the warps, no barrier
//           until the end; at most 4 rows per kv head (q_len * Hq / Hkv),
//           InvalidArgument past that;
//   kMma:   as kWarps, but K/V read straight into tensor-core fragments
//           (mma.m16n8k16, bf16 P) for 16 rows at a time
//           (paged_attention_mma.cu); any row count;
//   kAuto:  kWarps where the call has at most 4 rows per kv head
//           ((T - B + 1) * Hq / Hkv: one new token a sequence and
//           Hq / Hkv <= 4, say), else kMma.
// kAuto is the default (docs/benchmarks.md "Paged decode attention", H100:
// the warps kernel ran 1.07-1.22x the tiles wherever it fits, the mma
// kernel 1.06-2.24x at a GQA group of 8). All write the
// same rows (NaN rows, splits, skipped sequences alike) and agree up to
// summation order (and kMma's bf16 P).
enum class PagedKernel { kAuto, kTiles, kWarps, kMma };

// The most rows per kv head a sequence of `s` can have, (T - B + 1) *
// Hq / Hkv (each sequence has at least one new token), and whether the
// warps kernel holds that many (at most 4).
int64_t PagedMaxRows(const PagedAttentionShape& s);
bool PagedWarpsFit(const PagedAttentionShape& s);
// Whether a clustered plan may run `s`: at most 16 rows per kv head (the
// mma kernel's one row group; the warps kernel's 4 are fewer). A clustered
// plan with the tiles kernel, or past 16 rows, is refused.
bool PagedClusterFits(const PagedAttentionShape& s);

// q, out [T, Hq, D]; key_blocks, value_blocks [num_blocks, block_size, Hkv,
// D]; block_table [B, max_blocks_per_seq], context_lens [B], q_starts
// [B + 1] int32, all on the device; pointers 16-byte aligned.
Status PagedAttentionCuda(const PagedAttentionShape& shape, const PagedAttentionPlan& plan, const __nv_bfloat16* q,
                          const __nv_bfloat16* key_blocks, const __nv_bfloat16* value_blocks,
                          const int32_t* block_table, const int32_t* context_lens, const int32_t* q_starts,
                          __nv_bfloat16* out, void* workspace, size_t workspace_bytes, cudaStream_t stream,
                          PagedKernel kernel = PagedKernel::kAuto);

// k, v [T, Hkv, D] into the pools at slot_mapping [T] (int64, device). A
// negative slot is skipped, and so (on the device, unchecked) is one >=
// num_slots. Hkv * D a multiple of 8, pointers 16-byte aligned.
Status PagedKvWriteCuda(const PagedKvWriteShape& shape, const __nv_bfloat16* k, const __nv_bfloat16* v,
                        const int64_t* slot_mapping, __nv_bfloat16* key_blocks, __nv_bfloat16* value_blocks,
                        cudaStream_t stream);

}  // namespace tandem::kernels
