// The KV block pool (block_allocator.h): counts, sharing, copy on write,
// and every misuse reported as a Status that changes nothing; a random walk
// against a plain reference model of the counts.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "workers/inference/block_allocator.h"

namespace tandem::inference {
namespace {

std::unique_ptr<BlockAllocator> Pool(int32_t n, int32_t bs = 4) {
  auto a = BlockAllocator::Create(n, bs);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  return std::move(a).value();
}

TEST(BlockAllocator, RejectsEmptyPools) {
  EXPECT_EQ(BlockAllocator::Create(0, 16).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(BlockAllocator::Create(4, 0).status().code(), StatusCode::kInvalidArgument);
}

TEST(BlockAllocator, AllocatesUntilDryThenFreesBack) {
  auto a = Pool(3);
  std::vector<BlockId> got;
  for (int i = 0; i < 3; ++i) {
    auto b = a->Allocate();
    ASSERT_TRUE(b.ok());
    got.push_back(*b);
    EXPECT_EQ(a->ref_count(*b), 1);
  }
  EXPECT_EQ(got, (std::vector<BlockId>{0, 1, 2}));  // lowest first
  EXPECT_EQ(a->num_free(), 0);
  EXPECT_EQ(a->Allocate().status().code(), StatusCode::kResourceExhausted);
  ASSERT_TRUE(a->ReleaseAll(got).ok());
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(a->num_free(), 3);
}

TEST(BlockAllocator, DoubleFreeAndBadIdsAreErrorsThatChangeNothing) {
  auto a = Pool(2);
  const BlockId b = *a->Allocate();
  ASSERT_TRUE(a->Release(b).ok());
  EXPECT_EQ(a->Release(b).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(a->Retain(b).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(a->Release(-1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a->Release(2).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a->num_free(), 2);
  BlockId freed = b;
  EXPECT_EQ(a->MakeWritable(freed).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(a->Fork({b}).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(a->num_free(), 2);
}

TEST(BlockAllocator, ForkSharesAndCopyOnWriteSplits) {
  auto a = Pool(4);
  std::vector<BlockId> table{*a->Allocate(), *a->Allocate()};
  auto fork = a->Fork(table);
  ASSERT_TRUE(fork.ok());
  EXPECT_EQ(*fork, table);
  EXPECT_EQ(a->ref_count(table[0]), 2);
  EXPECT_EQ(a->ref_count(table[1]), 2);
  // The fork writes into the shared last block: it gets a copy.
  auto copy = a->MakeWritable(fork->back());
  ASSERT_TRUE(copy.ok());
  ASSERT_TRUE(copy->has_value());
  EXPECT_EQ(**copy, (BlockCopy{table[1], fork->back()}));
  EXPECT_NE(fork->back(), table[1]);
  EXPECT_EQ(a->ref_count(table[1]), 1);
  // The original is now alone in its block: no copy.
  auto none = a->MakeWritable(table[1]);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  ASSERT_TRUE(a->ReleaseAll(*fork).ok());
  EXPECT_EQ(a->ref_count(table[0]), 1);
  ASSERT_TRUE(a->ReleaseAll(table).ok());
  EXPECT_EQ(a->num_free(), 4);
}

TEST(BlockAllocator, CopyOnWriteWithoutAFreeBlockChangesNothing) {
  auto a = Pool(1);
  BlockId b = *a->Allocate();
  ASSERT_TRUE(a->Retain(b).ok());
  const BlockId before = b;
  EXPECT_EQ(a->MakeWritable(b).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(b, before);
  EXPECT_EQ(a->ref_count(b), 2);
}

TEST(BlockAllocator, RandomWalkMatchesAReferenceCount) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int32_t n = 16;
  auto a = Pool(n);
  std::map<BlockId, int32_t> ref;  // allocated blocks only
  for (int i = 0; i < 20000; ++i) {
    const int op = static_cast<int>(rng() % 4);
    const BlockId any = static_cast<BlockId>(rng() % (n + 2)) - 1;  // includes -1 and n
    if (op == 0) {
      auto b = a->Allocate();
      if (static_cast<int32_t>(ref.size()) == n) {
        ASSERT_EQ(b.status().code(), StatusCode::kResourceExhausted);
      } else {
        ASSERT_TRUE(b.ok());
        ASSERT_EQ(ref.count(*b), 0U);
        ref[*b] = 1;
      }
    } else if (op == 1) {
      const Status s = a->Retain(any);
      ASSERT_EQ(s.ok(), ref.count(any) > 0) << s.ToString();
      if (s.ok()) ++ref[any];
    } else if (op == 2) {
      const Status s = a->Release(any);
      ASSERT_EQ(s.ok(), ref.count(any) > 0) << s.ToString();
      if (s.ok() && --ref[any] == 0) ref.erase(any);
    } else {
      BlockId b = any;
      auto c = a->MakeWritable(b);
      if (ref.count(any) == 0) {
        ASSERT_FALSE(c.ok());
      } else if (ref[any] == 1) {
        ASSERT_TRUE(c.ok() && !c->has_value());
      } else if (static_cast<int32_t>(ref.size()) == n) {
        ASSERT_EQ(c.status().code(), StatusCode::kResourceExhausted);
      } else {
        ASSERT_TRUE(c.ok() && c->has_value());
        ASSERT_EQ((*c)->src, any);
        --ref[any];
        ref[b] = 1;
      }
    }
    ASSERT_EQ(a->num_free(), n - static_cast<int32_t>(ref.size()));
    for (BlockId b = 0; b < n; ++b) ASSERT_EQ(a->ref_count(b), ref.count(b) ? ref[b] : 0) << "block " << b;
  }
}

}  // namespace
}  // namespace tandem::inference
