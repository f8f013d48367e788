// Tree attention on CPU: the oracle against flat causal attention over each
// original sequence and against finite differences; the CPU implementation
// (the one workers call) against the oracle over swept forests and shapes.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/testing/compare.h"
#include "kernels/tree_attention/forest_builder.h"
#include "kernels/tree_attention/tests/random_forest.h"
#include "kernels/tree_attention/tree_attention.h"

namespace tandem::kernels {
namespace {

using testing::CheckClose;
using testing::FreshSeed;
using testing::RandomVector;

TreeAttentionShape Shape(int T, int hq, int hkv, int d) {
  return TreeAttentionShape{T, hq, hkv, d, 1.f / std::sqrt(static_cast<float>(d))};
}

// Plain causal attention over one sequence given by token rows `rows`.
void FlatAttention(const TreeAttentionShape& s, const float* q, const float* k, const float* v,
                   const std::vector<int32_t>& rows, int64_t h, std::vector<float>& out) {
  const int64_t D = s.head_dim, G = s.num_q_heads / s.num_kv_heads;
  out.assign(rows.size() * D, 0.f);
  for (size_t i = 0; i < rows.size(); ++i) {
    std::vector<double> sc(i + 1);
    double mx = -INFINITY, sum = 0;
    for (size_t j = 0; j <= i; ++j) {
      double d = 0;
      for (int64_t x = 0; x < D; ++x) d += double(q[(rows[i] * s.num_q_heads + h) * D + x]) * k[(rows[j] * s.num_kv_heads + h / G) * D + x];
      sc[j] = d * s.scale;
      mx = std::max(mx, sc[j]);
    }
    for (double& x : sc) sum += (x = std::exp(x - mx));
    for (size_t j = 0; j <= i; ++j) {
      for (int64_t x = 0; x < D; ++x) out[i * D + x] += float(sc[j] / sum * v[(rows[j] * s.num_kv_heads + h / G) * D + x]);
    }
  }
}

TEST(TreeAttentionRef, EqualsFlatCausalAttentionOfEverySequence) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  auto seqs = testing::RandomGroup(rng, 9, 5, 4);
  seqs.push_back({7, 7, 7});
  auto pk = BuildPackedForest(seqs);
  ASSERT_TRUE(pk.ok());
  const auto s = Shape(pk->forest.num_tokens, 4, 2, 16);
  auto q = RandomVector(rng, size_t(s.num_tokens) * 4 * 16), k = RandomVector(rng, size_t(s.num_tokens) * 2 * 16),
       v = RandomVector(rng, size_t(s.num_tokens) * 2 * 16);
  std::vector<float> o(q.size(), testing::kPoison), lse(size_t(s.num_tokens) * 4, testing::kPoison);
  TreeAttentionForwardRef(pk->forest, s, q.data(), k.data(), v.data(), o.data(), lse.data());
  for (size_t sq = 0; sq < seqs.size(); ++sq) {
    std::vector<int32_t> rows(pk->seq_positions.begin() + pk->seq_offsets[sq],
                              pk->seq_positions.begin() + pk->seq_offsets[sq + 1]);
    for (int h = 0; h < 4; ++h) {
      std::vector<float> flat, tree;
      FlatAttention(s, q.data(), k.data(), v.data(), rows, h, flat);
      for (int32_t r : rows) tree.insert(tree.end(), o.begin() + (r * 4 + h) * 16, o.begin() + (r * 4 + h + 1) * 16);
      EXPECT_EQ(CheckClose(tree, flat, testing::kFp32), "") << "sequence " << sq << " head " << h;
    }
  }
}

TEST(TreeAttentionRef, GradientsMatchFiniteDifferences) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const Forest f{9, {{0, 3, -1}, {3, 2, 0}, {5, 1, 1}, {6, 1, 0}, {7, 2, -1}}};
  ASSERT_TRUE(ValidateForest(f).ok());
  const auto s = Shape(9, 2, 1, 8);
  auto q = RandomVector(rng, 9 * 2 * 8), k = RandomVector(rng, 9 * 8), v = RandomVector(rng, 9 * 8);
  auto dout = RandomVector(rng, q.size());
  std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
  TreeAttentionBackwardRef(f, s, q.data(), k.data(), v.data(), dout.data(), dq.data(), dk.data(), dv.data());
  auto loss = [&]() {
    std::vector<float> o(q.size());
    TreeAttentionForwardRef(f, s, q.data(), k.data(), v.data(), o.data(), nullptr);
    double l = 0;
    for (size_t i = 0; i < o.size(); ++i) l += double(o[i]) * dout[i];
    return l;
  };
  const float h = 1e-2f;
  auto check = [&](std::vector<float>& x, const std::vector<float>& g, const char* name) {
    for (size_t i = 0; i < x.size(); ++i) {
      const float saved = x[i];
      x[i] = saved + h;
      const double lp = loss();
      x[i] = saved - h;
      const double lm = loss();
      x[i] = saved;
      const double fd = (lp - lm) / (2 * h);
      EXPECT_NEAR(g[i], fd, 2e-3 + 2e-2 * std::fabs(fd)) << name << "[" << i << "]";
    }
  };
  check(q, dq, "dq");
  check(k, dk, "dk");
  check(v, dv, "dv");
}

struct SweepCase {
  testing::ForestParams forest;
  int hq, hkv, d;
};

TEST(TreeAttentionCpu, MatchesOracleOverForestsAndShapes) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const std::vector<SweepCase> cases = {
      {{1, 1, 200, 1, 130}, 2, 1, 64},    // one plain sequence, not a multiple of the tile
      {{64, 1, 1, 1, 160}, 2, 2, 64},     // depth 64 of one-token segments (a chain)
      {{3, 16, 9, 1, 250}, 4, 2, 64},     // fan-out 16
      {{64, 3, 1, 2, 200}, 2, 1, 128},    // deep, one-token segments, branching
      {{6, 4, 70, 3, 300}, 4, 1, 128},    // segments longer than a tile, three tries
      {{2, 16, 1, 4, 100}, 1, 1, 64},     // one-token segments, wide
  };
  for (size_t c = 0; c < cases.size(); ++c) {
    const SweepCase& sc = cases[c];
    const Forest f = testing::RandomForest(rng, sc.forest);
    SCOPED_TRACE("case " + std::to_string(c) + " tokens=" + std::to_string(f.num_tokens));
    auto plan = BuildTreeAttentionPlan(f);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    const auto s = Shape(f.num_tokens, sc.hq, sc.hkv, sc.d);
    const size_t nq = size_t(f.num_tokens) * sc.hq * sc.d, nk = size_t(f.num_tokens) * sc.hkv * sc.d;
    auto q = RandomVector(rng, nq, -2, 2), k = RandomVector(rng, nk, -2, 2), v = RandomVector(rng, nk);
    auto dout = RandomVector(rng, nq);
    std::vector<float> o_ref(nq), lse_ref(size_t(f.num_tokens) * sc.hq);
    TreeAttentionForwardRef(f, s, q.data(), k.data(), v.data(), o_ref.data(), lse_ref.data());
    std::vector<float> o(nq, testing::kPoison), lse(lse_ref.size(), testing::kPoison);
    ASSERT_TRUE(TreeAttentionForwardCpu(*plan, s, q.data(), k.data(), v.data(), o.data(), lse.data()).ok());
    EXPECT_EQ(CheckClose(o, o_ref, testing::kFp32), "") << "out";
    EXPECT_EQ(CheckClose(lse, lse_ref, testing::kFp32), "") << "lse";

    std::vector<float> dq_ref(nq), dk_ref(nk), dv_ref(nk);
    TreeAttentionBackwardRef(f, s, q.data(), k.data(), v.data(), dout.data(), dq_ref.data(), dk_ref.data(), dv_ref.data());
    std::vector<float> dq(nq, testing::kPoison), dk(nk, testing::kPoison), dv(nk, testing::kPoison);
    ASSERT_TRUE(TreeAttentionBackwardCpu(*plan, s, q.data(), k.data(), v.data(), o.data(), lse.data(), dout.data(),
                                         dq.data(), dk.data(), dv.data())
                    .ok());
    EXPECT_EQ(CheckClose(dq, dq_ref, testing::kFp32), "") << "dq";
    EXPECT_EQ(CheckClose(dk, dk_ref, testing::kFp32), "") << "dk";
    EXPECT_EQ(CheckClose(dv, dv_ref, testing::kFp32), "") << "dv";
  }
}

TEST(TreeAttentionCpu, RejectsBadShapes) {
  const Forest f{4, {{0, 4, -1}}};
  auto plan = BuildTreeAttentionPlan(f);
  ASSERT_TRUE(plan.ok());
  std::vector<float> buf(4 * 3 * 64);
  EXPECT_FALSE(TreeAttentionForwardCpu(*plan, Shape(4, 3, 2, 64), buf.data(), buf.data(), buf.data(), buf.data(), nullptr).ok());
  EXPECT_FALSE(TreeAttentionForwardCpu(*plan, Shape(5, 2, 2, 64), buf.data(), buf.data(), buf.data(), buf.data(), nullptr).ok());
}

}  // namespace
}  // namespace tandem::kernels
