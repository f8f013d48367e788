// Paged attention on the CPU: the fp32 implementation against the fp64
// oracle on random block tables (shuffled pool, shared leading blocks, NaN
// wherever nothing may be read), contexts 1..2000, 1..4 new tokens per
// sequence, GQA group sizes 1..8, head dims 16..128, without splits, with
// the device plan's splits and with 64-key splits (the combine pass); a
// step of q_len new tokens equals q_len one-token steps; the split plan's
// invariants; the slot write; bad input rejected with the field named.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/paged_attention/paged_attention.h"
#include "kernels/paged_attention/paged_attention_rules.h"
#include "kernels/paged_attention/tests/random_paged.h"
#include "kernels/testing/compare.h"

namespace tandem::kernels {
namespace {

using testing::CheckClose;
using testing::MakePagedProblem;
using testing::PagedCase;
using testing::PagedProblem;

std::vector<float> RunCpu(const PagedProblem& p, const PagedAttentionPlan& plan) {
  std::vector<float> out(p.q.size(), testing::kPoison);
  const Status st = PagedAttentionCpu(p.s, plan, p.q.data(), p.key_blocks.data(), p.value_blocks.data(),
                                      p.block_table.data(), p.context_lens.data(), p.q_starts.data(), out.data());
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out;
}

std::vector<float> RunRef(const PagedProblem& p) {
  std::vector<float> out(p.q.size(), testing::kPoison);
  PagedAttentionRef(p.s, p.q.data(), p.key_blocks.data(), p.value_blocks.data(), p.block_table.data(),
                    p.context_lens.data(), p.q_starts.data(), out.data());
  return out;
}

struct Config {
  int32_t heads, kv_heads, head_dim, block_size, batch, max_ctx, max_q;
  float q_range;
};

TEST(PagedAttentionCpu, MatchesOracleOverShapesAndPlans) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (const Config& c : {Config{8, 2, 64, 16, 5, 2000, 4, 1.f}, Config{4, 4, 16, 1, 4, 300, 3, 2.f},
                          Config{6, 3, 128, 32, 3, 1500, 4, 1.f}, Config{2, 1, 80, 8, 6, 700, 2, 3.f},
                          Config{16, 2, 64, 16, 3, 1100, 4, 1.f}}) {
    SCOPED_TRACE("Hq=" + std::to_string(c.heads) + " Hkv=" + std::to_string(c.kv_heads) + " D=" +
                 std::to_string(c.head_dim) + " bs=" + std::to_string(c.block_size));
    PagedCase pc = testing::RandomPagedCase(rng, c.heads, c.kv_heads, c.head_dim, c.block_size, c.batch, c.max_ctx,
                                            c.max_q);
    pc.q_range = c.q_range;
    const PagedProblem p = MakePagedProblem(rng, pc);
    const std::vector<float> ref = RunRef(p);
    const PagedAttentionPlan device = PlanPagedAttention(p.s, 132);
    const PagedAttentionPlan fine{kPagedMaxSplits, kPagedTileTokens};  // 64-key splits up to 4096 keys
    for (const PagedAttentionPlan& plan :
         {SingleSplitPlan(), device, fine, PagedAttentionPlan{3, 128}, PagedAttentionPlan{8, 64, true}}) {
      SCOPED_TRACE("splits=" + std::to_string(plan.num_splits) + " of >= " + std::to_string(plan.min_split_tokens));
      EXPECT_EQ(CheckClose(RunCpu(p, plan), ref, testing::kFp32), "");
    }
  }
}

// New token j of a q_len-token step sees what a one-token step at context
// context_len - q_len + j + 1 sees: the same rows, through the same table.
TEST(PagedAttentionCpu, ChunkEqualsOneTokenSteps) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const PagedCase pc{4, 2, 32, 4, {37, 9}, {4, 3}, 2.f};
  const PagedProblem p = MakePagedProblem(rng, pc);
  const std::vector<float> chunk = RunCpu(p, PlanPagedAttention(p.s, 132));
  const int64_t row = int64_t{pc.heads} * pc.head_dim;
  for (int32_t b = 0; b < 2; ++b) {
    for (int32_t j = 0; j < pc.q_lens[static_cast<size_t>(b)]; ++j) {
      PagedProblem one = p;
      one.s.num_seqs = 1;
      one.s.num_tokens = 1;
      one.block_table.assign(p.block_table.begin() + b * p.s.max_blocks_per_seq,
                             p.block_table.begin() + (b + 1) * p.s.max_blocks_per_seq);
      one.context_lens = {pc.context_lens[static_cast<size_t>(b)] - pc.q_lens[static_cast<size_t>(b)] + j + 1};
      one.q_starts = {0, 1};
      const int64_t t = p.q_starts[static_cast<size_t>(b)] + j;
      one.q.assign(p.q.begin() + t * row, p.q.begin() + (t + 1) * row);
      const std::vector<float> step = RunCpu(one, SingleSplitPlan());
      EXPECT_EQ(CheckClose(step.data(), chunk.data() + t * row, static_cast<size_t>(row), testing::kFp32), "")
          << "sequence " << b << " token " << j;
    }
  }
}

TEST(PagedAttentionCpu, OneKeyGivesItsValue) {
  std::mt19937_64 rng(7);
  const PagedProblem p = MakePagedProblem(rng, PagedCase{2, 1, 8, 16, {1}, {1}, 5.f});
  const std::vector<float> out = RunCpu(p, SingleSplitPlan());
  const int64_t slot = int64_t{p.block_table[0]} * 16;
  for (int h = 0; h < 2; ++h)
    for (int d = 0; d < 8; ++d) EXPECT_EQ(out[static_cast<size_t>(h * 8 + d)], p.value_blocks[static_cast<size_t>(slot * 8 + d)]);
}

TEST(PagedAttentionPlanTest, SplitsSmallBatchesAcrossTheDevice) {
  for (int32_t B : {1, 3, 16, 64, 256}) {
    for (int32_t width : {1, 7, 32, 256}) {
      PagedAttentionShape s;
      s.num_seqs = B;
      s.num_tokens = B;
      s.num_heads = 16;
      s.num_kv_heads = 8;
      s.head_dim = 128;
      s.num_blocks = 4096;
      s.block_size = 16;
      s.max_blocks_per_seq = width;
      s.scale = 0.1f;
      const PagedAttentionPlan p = PlanPagedAttention(s, 132);
      SCOPED_TRACE("B=" + std::to_string(B) + " width=" + std::to_string(width));
      EXPECT_TRUE(CheckPagedAttentionPlan(p).ok());
      EXPECT_EQ(p.min_split_tokens, kPagedMinSplitTokens);
      EXPECT_LE(int64_t{p.num_splits} * kPagedMinSplitTokens, std::max<int64_t>(s.capacity(), kPagedMinSplitTokens));
      if (p.num_splits < kPagedMaxSplits && int64_t{p.num_splits + 1} * kPagedMinSplitTokens <= s.capacity()) {
        EXPECT_GE(int64_t{B} * s.num_kv_heads * p.num_splits, 4 * 132);  // not capped: fills the device
      }
      if (B >= 128) {
        EXPECT_EQ(p.num_splits, 1);
      }
    }
  }
  PagedAttentionShape s;
  s.num_seqs = 1;
  s.num_kv_heads = 8;
  s.block_size = 16;
  s.max_blocks_per_seq = 256;  // 4096 keys
  EXPECT_GE(PlanPagedAttention(s, 132).num_splits, 16);  // batch 1 spreads over the device
  // A smaller minimum allows more splits of a short capacity; it is rounded up to a multiple of 64.
  s.max_blocks_per_seq = 16;  // 256 keys
  EXPECT_EQ(PlanPagedAttention(s, 132).num_splits, 2);
  const PagedAttentionPlan fine = PlanPagedAttention(s, 132, kPagedTileTokens);
  EXPECT_EQ(fine.num_splits, 4);
  EXPECT_EQ(fine.min_split_tokens, kPagedTileTokens);
  EXPECT_EQ(PlanPagedAttention(s, 132, 100).min_split_tokens, 128);
  EXPECT_FALSE(CheckPagedAttentionPlan(PagedAttentionPlan{0, 64}).ok());
  EXPECT_FALSE(CheckPagedAttentionPlan(PagedAttentionPlan{kPagedMaxSplits + 1, 64}).ok());
  EXPECT_FALSE(CheckPagedAttentionPlan(PagedAttentionPlan{4, 96}).ok());
}

// A clustered plan: at most kPagedMaxClusterSplits splits, clustered only
// when there are several; a plan claiming more is refused.
TEST(PagedAttentionPlanTest, ClusteredPlansHaveAtMostEightSplits) {
  PagedAttentionShape s;
  s.num_seqs = 1;
  s.num_kv_heads = 2;
  s.block_size = 16;
  s.max_blocks_per_seq = 256;  // 4096 keys
  const PagedAttentionPlan p = PlanPagedAttention(s, 132, kPagedTileTokens, true);
  EXPECT_EQ(p.num_splits, kPagedMaxClusterSplits);
  EXPECT_TRUE(p.cluster);
  EXPECT_TRUE(CheckPagedAttentionPlan(p).ok());
  s.num_seqs = 512;  // fills the device unsplit: no cluster
  const PagedAttentionPlan one = PlanPagedAttention(s, 132, kPagedTileTokens, true);
  EXPECT_EQ(one.num_splits, 1);
  EXPECT_FALSE(one.cluster);
  EXPECT_FALSE(PlanPagedAttention(s, 132).cluster);
  const Status st = CheckPagedAttentionPlan(PagedAttentionPlan{kPagedMaxClusterSplits + 1, 64, true});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("a clustered plan has at most 8 splits"), std::string::npos) << st.message();
}

// A sequence's splits follow its own length: at most num_splits, each a
// multiple of 64 keys and at least the plan's minimum, covering the keys
// with no empty split; one split under SingleSplitPlan.
TEST(PagedAttentionPlanTest, SequenceSplitsFollowTheContext) {
  for (int32_t num_splits : {1, 2, 5, 64}) {
    for (int32_t min_split : {64, 128, 256}) {
      for (int32_t ctx = 1; ctx <= 9000; ctx += ctx < 300 ? 1 : 37) {
        SCOPED_TRACE("splits=" + std::to_string(num_splits) + " min=" + std::to_string(min_split) +
                     " ctx=" + std::to_string(ctx));
        const int32_t len = detail::PagedSplitLen(ctx, num_splits, min_split);
        const int32_t n = detail::PagedSeqSplits(1, ctx, 9000, num_splits, min_split);
        ASSERT_EQ(len % kPagedTileTokens, 0);
        ASSERT_GE(len, min_split);
        ASSERT_GE(n, 1);
        ASSERT_LE(n, num_splits);
        ASSERT_GE(int64_t{n} * len, ctx);
        ASSERT_LT(int64_t{n - 1} * len, ctx);
      }
    }
  }
  EXPECT_EQ(detail::PagedSeqSplits(1, 4000, 4096, SingleSplitPlan().num_splits, SingleSplitPlan().min_split_tokens),
            1);
  EXPECT_EQ(detail::PagedSeqSplits(1, 550, 4096, 5, kPagedMinSplitTokens), 5);  // 128-key splits
  EXPECT_EQ(detail::PagedSeqSplits(2, 1, 4096, 5, 128), 0);                       // ctx < q_len
  EXPECT_EQ(detail::PagedSeqSplits(1, 5000, 4096, 5, 128), 0);                    // ctx > capacity
}

TEST(PagedKvWrite, WritesSlotsSkipsNegativeAndChecksFirst) {
  const PagedKvWriteShape s{3, 2, 4, 10};  // 10 slots of [2, 4]
  std::vector<float> k(24), v(24), kb(80, -7.f), vb(80, -7.f);
  for (int i = 0; i < 24; ++i) k[static_cast<size_t>(i)] = static_cast<float>(i), v[static_cast<size_t>(i)] = static_cast<float>(100 + i);
  std::vector<int64_t> slots{9, -1, 0};
  ASSERT_TRUE(PagedKvWriteCpu(s, k.data(), v.data(), slots.data(), kb.data(), vb.data()).ok());
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(kb[static_cast<size_t>(72 + i)], static_cast<float>(i));        // token 0 -> slot 9
    EXPECT_EQ(vb[static_cast<size_t>(72 + i)], static_cast<float>(100 + i));
    EXPECT_EQ(kb[static_cast<size_t>(i)], static_cast<float>(16 + i));       // token 2 -> slot 0
    EXPECT_EQ(vb[static_cast<size_t>(i)], static_cast<float>(116 + i));
  }
  for (int i = 8; i < 72; ++i) EXPECT_EQ(kb[static_cast<size_t>(i)], -7.f);  // token 1 skipped, nothing else touched
  std::vector<float> before = kb;
  slots = {1, 10, 2};
  const Status st = PagedKvWriteCpu(s, k.data(), v.data(), slots.data(), kb.data(), vb.data());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("slot_mapping[1] = 10"), std::string::npos) << st.message();
  EXPECT_EQ(kb, before);  // checked before any write
}

TEST(PagedAttentionCpu, RejectsBadInput) {
  std::mt19937_64 rng(3);
  const PagedProblem good = MakePagedProblem(rng, PagedCase{4, 2, 16, 4, {9, 5}, {2, 1}, 1.f});
  auto run = [](const PagedProblem& p) {
    std::vector<float> out(p.q.size());
    return PagedAttentionCpu(p.s, SingleSplitPlan(), p.q.data(), p.key_blocks.data(), p.value_blocks.data(),
                             p.block_table.data(), p.context_lens.data(), p.q_starts.data(), out.data());
  };
  ASSERT_TRUE(run(good).ok());
  auto expect_error = [&](const PagedProblem& p, const std::string& needle) {
    const Status st = run(p);
    EXPECT_FALSE(st.ok()) << needle;
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
  };
  PagedProblem p = good;
  p.block_table[static_cast<size_t>(p.s.max_blocks_per_seq + 1)] = p.s.num_blocks;  // sequence 1's second block
  expect_error(p, "sequence 1: block_table[1]");
  p = good;
  p.context_lens[0] = 1;  // fewer keys than new tokens
  expect_error(p, "sequence 0: context_len 1");
  p = good;
  p.context_lens[1] = static_cast<int32_t>(p.s.capacity()) + 1;
  expect_error(p, "sequence 1: context_len");
  p = good;
  p.q_starts[1] = 0;  // sequence 0 with no new token
  expect_error(p, "sequence 0: q_len 0");
  p = good;
  p.q_starts[2] = 2;
  expect_error(p, "q_starts must run from 0 to T=3");
  p = good;
  p.s.num_kv_heads = 3;
  expect_error(p, "multiple of num_kv_heads");
  p = good;
  p.s.block_size = 6;
  expect_error(p, "power of two");
  p = good;
  p.s.scale = 0.f;
  expect_error(p, "scale");
  p = good;
  std::vector<float> out(p.q.size());
  EXPECT_FALSE(PagedAttentionCpu(p.s, PagedAttentionPlan{1, 16}, p.q.data(), p.key_blocks.data(),
                                 p.value_blocks.data(), p.block_table.data(), p.context_lens.data(),
                                 p.q_starts.data(), out.data())
                   .ok());  // splits not a multiple of kPagedTileTokens
}

}  // namespace
}  // namespace tandem::kernels
