// Hash-chained cache of full KV blocks with leaf-first LRU eviction
// (prefix_cache.h).
#include "workers/inference/prefix_cache.h"

#include <algorithm>
#include <string>

namespace tandem::inference {
namespace {

uint64_t Mix(uint64_t x) {  // SplitMix64's finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace

BlockKey PrefixCache::KeyOf(BlockKey parent, std::span<const int32_t> tokens) {
  uint64_t h = Mix(parent + 0x9e3779b97f4a7c15ULL);
  for (const int32_t t : tokens) h = Mix(h + 0x9e3779b97f4a7c15ULL + static_cast<uint32_t>(t));
  return h == kRootBlockKey ? 1 : h;
}

int64_t PrefixCache::references(BlockId block) const {
  auto it = cached_block_count_.find(block);
  return it == cached_block_count_.end() ? 0 : it->second;
}

void PrefixCache::Touch(BlockKey key, Entry& e) {
  if (e.children == 0) leaves_.erase({e.last_use, key});
  e.last_use = ++clock_;
  if (e.children == 0) leaves_.insert({e.last_use, key});
}

StatusOr<PrefixCache::Match> PrefixCache::Lookup(std::span<const int32_t> tokens, int64_t max_tokens) {
  Match m;
  const int64_t bs = allocator_->block_size();
  const int64_t limit = std::min<int64_t>(max_tokens, static_cast<int64_t>(tokens.size()));
  BlockKey parent = kRootBlockKey;
  for (int64_t start = 0; start + bs <= limit; start += bs) {
    const std::span<const int32_t> block_tokens = tokens.subspan(static_cast<size_t>(start), static_cast<size_t>(bs));
    const BlockKey key = KeyOf(parent, block_tokens);
    auto it = entries_.find(key);
    if (it == entries_.end() || it->second.parent != parent ||
        !std::equal(block_tokens.begin(), block_tokens.end(), it->second.tokens.begin(), it->second.tokens.end()))
      break;
    m.blocks.push_back(it->second.block);
    parent = key;
  }
  Status s = Status::Ok();
  size_t retained = 0;
  for (; retained < m.blocks.size(); ++retained) {
    s = allocator_->Retain(m.blocks[retained]);
    if (!s.ok()) break;
  }
  if (!s.ok()) {  // the cache's own reference vanished: a bug, reported
    for (size_t i = 0; i < retained; ++i) (void)allocator_->Release(m.blocks[i]);
    return s.WithContext("prefix cache lookup");
  }
  // Mark used, deepest last, so the chain's leaf is the most recent.
  BlockKey key = kRootBlockKey;
  for (int64_t start = 0; start < static_cast<int64_t>(m.blocks.size()) * bs; start += bs) {
    key = KeyOf(key, tokens.subspan(static_cast<size_t>(start), static_cast<size_t>(bs)));
    Touch(key, entries_.at(key));
  }
  m.last_key = key;
  return m;
}

StatusOr<std::optional<BlockKey>> PrefixCache::Insert(BlockKey parent, std::span<const int32_t> tokens,
                                                      BlockId block) {
  if (static_cast<int64_t>(tokens.size()) != allocator_->block_size())
    return InvalidArgument("prefix cache insert: a block of " + std::to_string(tokens.size()) +
                           " tokens, expected block_size " + std::to_string(allocator_->block_size()));
  auto parent_it = entries_.end();
  if (parent != kRootBlockKey) {
    parent_it = entries_.find(parent);
    if (parent_it == entries_.end()) return std::optional<BlockKey>();
  }
  const BlockKey key = KeyOf(parent, tokens);
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    Entry& e = it->second;
    if (e.parent != parent || !std::equal(tokens.begin(), tokens.end(), e.tokens.begin(), e.tokens.end()))
      return std::optional<BlockKey>();  // collision: leave the chain uncached
    Touch(key, e);
    return std::optional<BlockKey>(key);
  }
  TANDEM_RETURN_IF_ERROR(allocator_->Retain(block), "prefix cache insert");
  Entry e;
  e.parent = parent;
  e.tokens.assign(tokens.begin(), tokens.end());
  e.block = block;
  e.last_use = ++clock_;
  if (parent_it != entries_.end()) {
    Entry& p = parent_it->second;
    if (p.children++ == 0) leaves_.erase({p.last_use, parent});
  }
  leaves_.insert({e.last_use, key});
  ++cached_block_count_[block];
  entries_.emplace(key, std::move(e));
  return std::optional<BlockKey>(key);
}

StatusOr<bool> PrefixCache::EvictOne() {
  for (auto it = leaves_.begin(); it != leaves_.end(); ++it) {
    const BlockKey key = it->second;
    auto e_it = entries_.find(key);
    if (e_it == entries_.end()) return Internal("prefix cache: leaf " + std::to_string(key) + " has no entry");
    const Entry& e = e_it->second;
    if (allocator_->ref_count(e.block) != 1) continue;  // a sequence still reads it
    leaves_.erase(it);
    const BlockId block = e.block;
    const BlockKey parent = e.parent;
    entries_.erase(e_it);
    if (--cached_block_count_[block] == 0) cached_block_count_.erase(block);
    if (parent != kRootBlockKey) {
      auto p_it = entries_.find(parent);
      if (p_it != entries_.end() && --p_it->second.children == 0) leaves_.insert({p_it->second.last_use, parent});
    }
    TANDEM_RETURN_IF_ERROR(allocator_->Release(block), "prefix cache evict");
    return true;
  }
  return false;
}

Status PrefixCache::Flush() {
  Status first;
  for (auto& [key, e] : entries_) {
    Status s = allocator_->Release(e.block);
    if (first.ok() && !s.ok()) first = s.WithContext("prefix cache flush");
  }
  entries_.clear();
  cached_block_count_.clear();
  leaves_.clear();
  return first;
}

}  // namespace tandem::inference
