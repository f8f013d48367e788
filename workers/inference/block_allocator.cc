// Reference-counted KV block pool (block_allocator.h).
#include "workers/inference/block_allocator.h"

#include <string>

namespace tandem::inference {

StatusOr<std::unique_ptr<BlockAllocator>> BlockAllocator::Create(int32_t num_blocks, int32_t block_size) {
  if (num_blocks < 1) return InvalidArgument("block allocator: num_blocks must be >= 1, got " + std::to_string(num_blocks));
  if (block_size < 1) return InvalidArgument("block allocator: block_size must be >= 1, got " + std::to_string(block_size));
  return std::unique_ptr<BlockAllocator>(new BlockAllocator(num_blocks, block_size));
}

BlockAllocator::BlockAllocator(int32_t num_blocks, int32_t block_size)
    : block_size_(block_size), ref_counts_(static_cast<size_t>(num_blocks), 0) {
  free_.reserve(static_cast<size_t>(num_blocks));
  for (BlockId b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

int32_t BlockAllocator::ref_count(BlockId block) const {
  if (block < 0 || block >= num_blocks()) return 0;
  return ref_counts_[static_cast<size_t>(block)];
}

Status BlockAllocator::CheckId(BlockId block, const char* what) const {
  if (block < 0 || block >= num_blocks())
    return InvalidArgument(std::string("block allocator: ") + what + " of block " + std::to_string(block) +
                           " outside [0, " + std::to_string(num_blocks()) + ")");
  if (ref_counts_[static_cast<size_t>(block)] == 0)
    return FailedPrecondition(std::string("block allocator: ") + what + " of block " + std::to_string(block) +
                              ", which is free");
  return Status::Ok();
}

StatusOr<BlockId> BlockAllocator::Allocate() {
  if (free_.empty())
    return ResourceExhausted("block allocator: all " + std::to_string(num_blocks()) + " KV blocks are in use");
  const BlockId b = free_.back();
  free_.pop_back();
  ref_counts_[static_cast<size_t>(b)] = 1;
  return b;
}

Status BlockAllocator::Retain(BlockId block) {
  TANDEM_RETURN_IF_ERROR(CheckId(block, "retain"));
  ++ref_counts_[static_cast<size_t>(block)];
  return Status::Ok();
}

Status BlockAllocator::Release(BlockId block) {
  TANDEM_RETURN_IF_ERROR(CheckId(block, "release"));
  if (--ref_counts_[static_cast<size_t>(block)] == 0) free_.push_back(block);
  return Status::Ok();
}

StatusOr<std::vector<BlockId>> BlockAllocator::Fork(const std::vector<BlockId>& table) {
  for (const BlockId b : table) TANDEM_RETURN_IF_ERROR(CheckId(b, "fork"));
  for (const BlockId b : table) ++ref_counts_[static_cast<size_t>(b)];
  return table;
}

Status BlockAllocator::ReleaseAll(std::vector<BlockId>& table) {
  Status first;
  for (const BlockId b : table) {
    Status s = Release(b);
    if (first.ok() && !s.ok()) first = s;
  }
  table.clear();
  return first;
}

StatusOr<std::optional<BlockCopy>> BlockAllocator::MakeWritable(BlockId& block) {
  TANDEM_RETURN_IF_ERROR(CheckId(block, "write"));
  if (ref_counts_[static_cast<size_t>(block)] == 1) return std::optional<BlockCopy>();
  TANDEM_ASSIGN_OR_RETURN(const BlockId fresh, Allocate(), "copy on write");
  const BlockCopy copy{block, fresh};
  --ref_counts_[static_cast<size_t>(block)];  // > 1 before: stays allocated
  block = fresh;
  return std::optional<BlockCopy>(copy);
}

}  // namespace tandem::inference
