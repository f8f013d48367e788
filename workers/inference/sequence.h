// One sample of a request inside the rollout engine (issue #14;
// docs/inference.md "KV blocks and the scheduler"). Torch-free; the
// scheduler owns every Sequence and is the only one to change it.
//
// tokens = prompt followed by the tokens generated so far. The first
// num_computed of them have their K/V in `blocks` (block i holds tokens
// [i * block_size, (i + 1) * block_size)); the rest (one while decoding,
// more while prefilling, all after a retract) are fed at the next steps.
// The first num_cached_blocks blocks are known to the prefix cache, the
// last of them keyed cache_key. A request of n samples starts as one
// sequence (sample 0) carrying the other n - 1 in `unforked`: they fork
// from it, sharing its blocks, when its prompt is computed.
#pragma once

#include <cstdint>
#include <vector>

#include "workers/inference/block_allocator.h"
#include "workers/inference/prefix_cache.h"

namespace tandem::inference {

using SequenceId = int64_t;

enum class SequenceState { kWaiting, kRunning, kFinished };

struct Sequence {
  SequenceId id = 0;
  RequestId request = 0;
  int64_t sample_index = 0;
  SequenceState state = SequenceState::kWaiting;

  std::vector<int32_t> tokens;  // prompt, then output
  int64_t prompt_len = 0;
  std::vector<float> output_logprobs;  // one per output token

  std::vector<BlockId> blocks;
  int64_t num_computed = 0;
  int64_t num_cached_blocks = 0;
  BlockKey cache_key = kRootBlockKey;
  bool cache_chain_open = true;  // false once an insert was refused: later blocks stay uncached
  int64_t cached_tokens = 0;     // prompt tokens served from the cache at the first prefill

  std::vector<SequenceId> unforked;  // samples that fork from this one after its prompt
  uint64_t admission = 0;            // larger: admitted more recently (younger)

  int64_t length() const { return static_cast<int64_t>(tokens.size()); }
  int64_t num_output() const { return length() - prompt_len; }
  int64_t pending() const { return length() - num_computed; }  // tokens to feed
};

}  // namespace tandem::inference
