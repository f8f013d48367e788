// The prefix cache (prefix_cache.h): longest whole-block prefix, chains that
// diverge, references handed to the caller, leaf-first LRU eviction that
// never takes a block a sequence holds, flush, and no reference left over.
#include <gtest/gtest.h>

#include <numeric>

#include "workers/inference/prefix_cache.h"

namespace tandem::inference {
namespace {

constexpr int32_t kBs = 4;

struct Fixture {
  std::unique_ptr<BlockAllocator> alloc = std::move(BlockAllocator::Create(8, kBs)).value();
  PrefixCache cache{alloc.get()};

  // Caches `tokens` block by block as a sequence would (its own blocks,
  // then released by the "sequence"); returns the blocks.
  std::vector<BlockId> Fill(const std::vector<int32_t>& tokens, bool release = true) {
    std::vector<BlockId> blocks;
    BlockKey parent = kRootBlockKey;
    for (size_t start = 0; start + kBs <= tokens.size(); start += kBs) {
      const BlockId b = *alloc->Allocate();
      blocks.push_back(b);
      auto key = cache.Insert(parent, std::span<const int32_t>(tokens).subspan(start, kBs), b);
      EXPECT_TRUE(key.ok() && key->has_value());
      parent = **key;
    }
    if (release) {
      std::vector<BlockId> copy = blocks;
      EXPECT_TRUE(alloc->ReleaseAll(copy).ok());
    }
    return blocks;
  }
};

std::vector<int32_t> Iota(int32_t n, int32_t from = 100) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), from);
  return v;
}

TEST(PrefixCache, LongestWholeBlockPrefix) {
  Fixture f;
  const std::vector<BlockId> blocks = f.Fill(Iota(12));
  EXPECT_EQ(f.cache.num_cached_blocks(), 3);
  EXPECT_EQ(f.alloc->num_free(), 5);
  struct Case {
    std::vector<int32_t> tokens;
    int64_t max_tokens;
    size_t want_blocks;
  } cases[] = {
      {Iota(12), 12, 3},  {Iota(12), 11, 2},  {Iota(14), 14, 3}, {Iota(7), 7, 1},
      {Iota(3), 3, 0},    {Iota(12, 101), 12, 0},
  };
  for (const Case& c : cases) {
    auto m = f.cache.Lookup(c.tokens, c.max_tokens);
    ASSERT_TRUE(m.ok());
    ASSERT_EQ(m->blocks.size(), c.want_blocks) << "max_tokens " << c.max_tokens;
    for (size_t i = 0; i < m->blocks.size(); ++i) {
      EXPECT_EQ(m->blocks[i], blocks[i]);
      EXPECT_EQ(f.alloc->ref_count(blocks[i]), 2);  // cache + caller
    }
    ASSERT_TRUE(f.alloc->ReleaseAll(m->blocks).ok());
  }
  // A chain that diverges in its second block matches only the first.
  std::vector<int32_t> diverge = Iota(12);
  diverge[5] = 7;
  auto m = f.cache.Lookup(diverge, 12);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->blocks.size(), 1U);
  ASSERT_TRUE(f.alloc->ReleaseAll(m->blocks).ok());
  // The same tokens under another parent are another key.
  std::vector<int32_t> shifted = Iota(8);
  std::copy(shifted.begin() + 4, shifted.end(), shifted.begin());  // block 1's tokens first
  m = f.cache.Lookup(shifted, 8);
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->blocks.empty());
}

TEST(PrefixCache, InsertNeedsACachedParentAndKeepsTheFirstCopy) {
  Fixture f;
  const std::vector<int32_t> t = Iota(8);
  const BlockId b = *f.alloc->Allocate();
  auto orphan = f.cache.Insert(PrefixCache::KeyOf(kRootBlockKey, std::span<const int32_t>(t).subspan(0, 4)) ^ 1,
                               std::span<const int32_t>(t).subspan(4, 4), b);
  ASSERT_TRUE(orphan.ok());
  EXPECT_FALSE(orphan->has_value());
  EXPECT_EQ(f.alloc->ref_count(b), 1);
  EXPECT_EQ(f.cache.Insert(kRootBlockKey, std::span<const int32_t>(t).subspan(0, 3), b).status().code(),
            StatusCode::kInvalidArgument);
  const std::vector<BlockId> first = f.Fill(t);
  // Another block with the same content: the cached one stays.
  auto again = f.cache.Insert(kRootBlockKey, std::span<const int32_t>(t).subspan(0, 4), b);
  ASSERT_TRUE(again.ok() && again->has_value());
  EXPECT_EQ(f.alloc->ref_count(b), 1);
  auto m = f.cache.Lookup(t, 8);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->blocks, first);
  ASSERT_TRUE(f.alloc->ReleaseAll(m->blocks).ok());
  ASSERT_TRUE(f.alloc->Release(b).ok());
}

TEST(PrefixCache, EvictsLeastRecentlyUsedLeavesNeverHeldBlocks) {
  Fixture f;
  const std::vector<BlockId> a = f.Fill(Iota(8, 0));     // chain A: 2 blocks
  const std::vector<BlockId> b = f.Fill(Iota(8, 50));    // chain B: 2 blocks
  const std::vector<BlockId> c = f.Fill(Iota(4, 90), false);  // C: held by a "sequence"
  EXPECT_EQ(f.alloc->num_free(), 3);
  // Touch A: B is now the least recently used.
  auto m = f.cache.Lookup(Iota(8, 0), 8);
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(f.alloc->ReleaseAll(m->blocks).ok());
  // Leaves first: B's second block, then B's first, then A's.
  const std::vector<BlockId> order{b[1], b[0], a[1], a[0]};
  for (const BlockId want : order) {
    auto e = f.cache.EvictOne();
    ASSERT_TRUE(e.ok() && *e);
    EXPECT_EQ(f.alloc->ref_count(want), 0) << "expected block " << want << " evicted";
  }
  auto none = f.cache.EvictOne();  // C is held
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(*none);
  EXPECT_EQ(f.alloc->ref_count(c[0]), 2);
  std::vector<BlockId> held = c;
  ASSERT_TRUE(f.alloc->ReleaseAll(held).ok());
  auto last = f.cache.EvictOne();
  ASSERT_TRUE(last.ok() && *last);
  EXPECT_EQ(f.alloc->num_free(), 8);
  EXPECT_EQ(f.cache.num_cached_blocks(), 0);
}

TEST(PrefixCache, FlushReleasesOnlyTheCachesReferences) {
  Fixture f;
  f.Fill(Iota(8, 0));
  const std::vector<BlockId> held = f.Fill(Iota(4, 60), false);
  f.cache.RecordLookup(8, 4);
  EXPECT_EQ(f.cache.hit_tokens(), 8);
  EXPECT_EQ(f.cache.miss_tokens(), 4);
  ASSERT_TRUE(f.cache.Flush().ok());
  EXPECT_EQ(f.cache.num_cached_blocks(), 0);
  EXPECT_EQ(f.alloc->ref_count(held[0]), 1);
  EXPECT_EQ(f.alloc->num_free(), 7);
  auto m = f.cache.Lookup(Iota(8, 0), 8);
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->blocks.empty());
}

}  // namespace
}  // namespace tandem::inference
