// The rollout engine's pool of KV blocks (issue #14; docs/inference.md "KV
// blocks and the scheduler"). Torch-free bookkeeping only: the KV tensors
// (model::PagedKv) live elsewhere and are indexed by the ids handed out here.
//
// A fixed pool of num_blocks blocks of block_size tokens each. Every block
// has a reference count: a sequence's block table holds one reference per
// entry, and the prefix cache holds one on each block it caches. Allocate
// hands out a free block with count 1; Retain adds a holder (the n samples
// of a prompt share its blocks: Fork); Release drops one and returns the
// block to the free list when the count reaches zero. A block that is
// written must have one holder: MakeWritable swaps a shared block for a
// fresh copy and says which copy the KV pools need (copy on write).
//
// Contract: ids outside [0, num_blocks) are InvalidArgument, Release or
// Retain of a free block is FailedPrecondition (a double free is reported,
// never performed), an empty pool is ResourceExhausted. A fresh pool hands
// out the lowest ids first and a freed block is reused first (a stack), so
// runs are deterministic.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "common/status.h"

namespace tandem::inference {

using BlockId = int32_t;

// Copy block `src`'s KV (every layer, keys and values) into block `dst`
// before the step that writes into `dst` runs.
struct BlockCopy {
  BlockId src = 0;
  BlockId dst = 0;
  bool operator==(const BlockCopy&) const = default;
};

class BlockAllocator {
 public:
  // InvalidArgument unless num_blocks >= 1 and block_size >= 1.
  static StatusOr<std::unique_ptr<BlockAllocator>> Create(int32_t num_blocks, int32_t block_size);

  int32_t num_blocks() const { return static_cast<int32_t>(ref_counts_.size()); }
  int32_t block_size() const { return block_size_; }
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t num_used() const { return num_blocks() - num_free(); }
  // 0 for a free block (or an id out of range).
  int32_t ref_count(BlockId block) const;

  // A free block with reference count 1, lowest id first; ResourceExhausted
  // when none is free.
  StatusOr<BlockId> Allocate();
  // One more holder of an allocated block.
  Status Retain(BlockId block);
  // One holder fewer; the block is free again when none is left.
  Status Release(BlockId block);

  // The table of a new sample that shares every block of `table` (each
  // retained once). All or nothing: on error no count has changed.
  StatusOr<std::vector<BlockId>> Fork(const std::vector<BlockId>& table);
  // Releases every entry of `table` and clears it. Keeps going past an
  // error and returns the first one.
  Status ReleaseAll(std::vector<BlockId>& table);

  // Makes `block` (an entry of the caller's table) safe to write: when the
  // caller is its only holder, nothing changes and nullopt is returned;
  // else a fresh block replaces it in `block`, the caller's reference to the
  // old one is released, and the copy {old, new} is returned.
  // ResourceExhausted (nothing changed) when no block is free.
  StatusOr<std::optional<BlockCopy>> MakeWritable(BlockId& block);

 private:
  BlockAllocator(int32_t num_blocks, int32_t block_size);
  Status CheckId(BlockId block, const char* what) const;

  int32_t block_size_;
  std::vector<int32_t> ref_counts_;
  std::vector<BlockId> free_;  // a stack: back() is handed out next
};

}  // namespace tandem::inference
