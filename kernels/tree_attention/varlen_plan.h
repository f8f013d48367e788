// Tree attention as dense variable-length attention (issue #19, the road
// that reuses the fastest dense kernel; docs/kernels-torch.md "Tree
// attention on dense varlen kernels"). Torch-free; the glue that runs it is
// workers/ops/tree_attention_varlen.h.
//
// Every segment of the forest is one block of a varlen attention call:
// its queries are the segment's own tokens (consecutive in the packed order,
// so the blocks' query rows are the packed rows as they are), its keys the
// tokens of its ancestors' segments, root first, then its own: the key path.
// With the causal mask aligned bottom-right (query i of a block of Lq
// queries and Lk keys sees keys j <= Lk - Lq + i) a block computes exactly
// the pairs of the forest's mask (forest.h): every ancestor key, and its own
// keys up to itself. The key paths are gathered from the packed keys
// (key_rows); the gradients of the gathered keys are summed back into the
// rows they came from.
//
// A key path holds as many keys as the flat batch's copy of that sequence,
// so the gather is bounded: blocks are cut into chunks of consecutive
// segments whose gathered keys stay within a budget (a segment whose path
// alone exceeds it is a chunk of its own). Each chunk is one call.
//
// The split form (BuildVarlenSplitPlan) needs no causal alignment, for
// kernels whose causal mask is aligned top-left: a self part, every segment
// against its own keys (square causal blocks over the packed rows as they
// are, nothing gathered), and an ancestor part, one block per segment with
// children: the rows of its children (gathered) against its key path
// (gathered once, not once per child), every query seeing every key. A
// row's two partial results are merged by their log-sum-exp; the backward
// runs both parts with the merged output and log-sum-exp.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "kernels/tree_attention/forest.h"

namespace tandem::kernels {

struct VarlenChunk {
  int32_t q_begin = 0;         // packed query rows [q_begin, q_end), when q_rows is empty
  int32_t q_end = 0;
  std::vector<int32_t> q_rows; // else the packed row of each query row (gathered)
  std::vector<int32_t> cu_q;   // block b's queries: [cu_q[b], cu_q[b+1]) of the chunk's query rows
  std::vector<int32_t> cu_k;   // block b's keys: [cu_k[b], cu_k[b+1]) of the chunk's key rows
  std::vector<int32_t> key_rows;  // the packed row of each key row; empty: the query rows' own keys
  int32_t max_q = 0;           // longest block, queries and keys
  int32_t max_k = 0;
  bool causal = true;          // bottom-right causal blocks; false: each query sees every key of its block
};

struct VarlenTreePlan {
  std::vector<VarlenChunk> chunks;  // in segment order, covering every segment
  int64_t gathered_keys = 0;        // sum of key_rows sizes
  int64_t pairs = 0;                // (query, key) pairs the blocks compute: TreePairs
};

// The forest must be valid (ValidateForest); 1 <= max_chunk_keys < 2^31.
StatusOr<VarlenTreePlan> BuildVarlenTreePlan(const Forest& forest, int64_t max_chunk_keys);

struct VarlenSplitPlan {
  VarlenChunk self;                   // causal, the packed rows, no key_rows
  std::vector<VarlenChunk> ancestors; // not causal, q_rows and key_rows gathered; a row in at most one
  int64_t gathered_keys = 0;
  int64_t gathered_queries = 0;
  int64_t pairs = 0;                  // both parts: TreePairs
};

// The same preconditions; the ancestor part is cut at max_chunk_keys keys.
StatusOr<VarlenSplitPlan> BuildVarlenSplitPlan(const Forest& forest, int64_t max_chunk_keys);

}  // namespace tandem::kernels
