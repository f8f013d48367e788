// The rollout engine's prefix cache over full KV blocks (issue #14;
// docs/inference.md "KV blocks and the scheduler"). Torch-free: it maps
// token content to block ids of a BlockAllocator and holds one reference on
// each block it caches.
//
// A full block's key chains its parent's: KeyOf(parent key, its
// block_size tokens), the first block's parent being kRootBlockKey. An
// entry stores its parent key and its tokens, and a lookup compares both,
// so a hash collision is a miss, never a wrong hit; by induction over the
// chain a hit means the whole prefix matches. Only whole blocks are cached
// (a partial block is still being written).
//
// Eviction: a cached block whose only holder is the cache, and which no
// cached block names as parent, is evictable; EvictOne frees the least
// recently used of them (looked up or inserted). A parent is therefore
// never evicted before its children. Flush drops every entry (blocks that
// sequences still hold stay theirs). Counters: prompt tokens served from
// the cache (hits) and prompt tokens computed (misses), as the scheduler
// records them at admission, for /metrics.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "workers/inference/block_allocator.h"

namespace tandem::inference {

using BlockKey = uint64_t;
inline constexpr BlockKey kRootBlockKey = 0;

class PrefixCache {
 public:
  // `allocator` is not owned and must outlive the cache.
  explicit PrefixCache(BlockAllocator* allocator) : allocator_(allocator) {}
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // The key of a block holding `tokens` after the block keyed `parent`.
  // Never kRootBlockKey.
  static BlockKey KeyOf(BlockKey parent, std::span<const int32_t> tokens);

  struct Match {
    std::vector<BlockId> blocks;         // the caller holds one reference on each
    BlockKey last_key = kRootBlockKey;   // key of the last matched block
  };
  // The longest chain of cached blocks that spells a prefix of
  // tokens[0, max_tokens) in whole blocks, marked recently used. The caller
  // owns a reference on each returned block.
  StatusOr<Match> Lookup(std::span<const int32_t> tokens, int64_t max_tokens);

  // Caches `block`, which holds `tokens` (exactly block_size of them), as the
  // child of the block keyed `parent`; the cache retains it. Returns its key
  // (the parent of the next block). When an equal entry is already cached
  // (same parent, same tokens, maybe another block id) that one stays and
  // its key is returned. nullopt, nothing retained, when the parent is not
  // cached or a different entry has the same key (a collision): the chain
  // is not cached past that point.
  StatusOr<std::optional<BlockKey>> Insert(BlockKey parent, std::span<const int32_t> tokens, BlockId block);

  // Frees the least recently used evictable block (see above); false when
  // none is evictable.
  StatusOr<bool> EvictOne();
  // Drops every entry, releasing the cache's references.
  Status Flush();

  int64_t num_cached_blocks() const { return static_cast<int64_t>(entries_.size()); }
  // How many entries hold `block` (0 or 1; for consistency checks).
  int64_t references(BlockId block) const;

  void RecordLookup(int64_t hit_tokens, int64_t computed_tokens) {
    hit_tokens_ += hit_tokens;
    miss_tokens_ += computed_tokens;
  }
  int64_t hit_tokens() const { return hit_tokens_; }
  int64_t miss_tokens() const { return miss_tokens_; }

 private:
  struct Entry {
    BlockKey parent = kRootBlockKey;
    std::vector<int32_t> tokens;
    BlockId block = 0;
    int64_t children = 0;
    uint64_t last_use = 0;
  };
  void Touch(BlockKey key, Entry& e);

  BlockAllocator* allocator_;
  std::unordered_map<BlockKey, Entry> entries_;
  std::unordered_map<BlockId, int64_t> cached_block_count_;  // block -> entries holding it
  std::set<std::pair<uint64_t, BlockKey>> leaves_;  // (last_use, key) of entries without children
  uint64_t clock_ = 0;
  int64_t hit_tokens_ = 0;
  int64_t miss_tokens_ = 0;
};

}  // namespace tandem::inference
