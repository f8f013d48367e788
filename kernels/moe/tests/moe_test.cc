// MoE on CPU: router and permutation against the oracle (softmax/sigmoid,
// renormalised or not, empty experts, every token on one expert); gradients of
// the router and the expert layer against finite differences; the CPU expert
// layer (what workers call without a GPU) against the oracle.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/moe/moe.h"
#include "kernels/testing/compare.h"

namespace tandem::kernels {
namespace {

using testing::CheckClose;
using testing::FreshSeed;
using testing::RandomVector;

TEST(MoeRouter, MatchesOracleAndFiniteDifferences) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (RouterScore score : {RouterScore::kSoftmax, RouterScore::kSigmoid}) {
    for (bool renorm : {true, false}) {
      const MoeShape s{37, 8, 8, 10, 3, score, renorm};
      auto logits = RandomVector(rng, 37 * 10, -3, 3);
      const RouterOutput ref = MoeRouterRef(s, logits.data());
      auto cpu = MoeRouterCpu(s, logits.data());
      ASSERT_TRUE(cpu.ok());
      EXPECT_EQ(cpu->topk_idx, ref.topk_idx);
      EXPECT_EQ(cpu->counts, ref.counts);
      EXPECT_EQ(CheckClose(cpu->topk_weight, ref.topk_weight, testing::kFp32), "");
      EXPECT_EQ(CheckClose(cpu->score_sum, ref.score_sum, testing::kFp32), "");
      // Finite differences of L = sum(gw * w) + sum(gs * score_sum), top-k fixed.
      auto gw = RandomVector(rng, 37 * 3), gs = RandomVector(rng, 10);
      std::vector<float> gl(logits.size());
      ASSERT_TRUE(MoeRouterBackwardCpu(s, ref, gw.data(), gs.data(), gl.data()).ok());
      auto loss = [&] {
        const RouterOutput r = MoeRouterRef(s, logits.data());
        double l = 0;
        for (size_t i = 0; i < gw.size(); ++i) l += double(gw[i]) * r.topk_weight[i];
        for (size_t e = 0; e < gs.size(); ++e) l += double(gs[e]) * r.score_sum[e];
        return std::make_pair(l, r.topk_idx);
      };
      const float h = 1e-3f;
      for (size_t i = 0; i < logits.size(); i += 7) {
        const float saved = logits[i];
        logits[i] = saved + h;
        auto [lp, ip] = loss();
        logits[i] = saved - h;
        auto [lm, im] = loss();
        logits[i] = saved;
        if (ip != ref.topk_idx || im != ref.topk_idx) continue;  // the selection moved
        const double fd = (lp - lm) / (2 * h);
        EXPECT_NEAR(gl[i], fd, 3e-3 + 3e-2 * std::fabs(fd)) << i;
      }
    }
  }
}

TEST(MoePermute, StableGroupingWithEmptyAndFullExperts) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const MoeShape s{50, 4, 4, 6, 2};
  std::vector<int32_t> idx(100);
  std::uniform_int_distribution<int32_t> pick(1, 4);  // experts 0 and 5 get nothing
  for (auto& i : idx) i = pick(rng);
  for (const auto& topk : {idx, std::vector<int32_t>(100, 3)}) {
    const PermutePlan ref = MoePermutePlanRef(s, topk.data());
    auto cpu = MoePermutePlanCpu(s, topk.data());
    ASSERT_TRUE(cpu.ok());
    EXPECT_EQ(cpu->offsets, ref.offsets);
    EXPECT_EQ(cpu->perm_pos, ref.perm_pos);
    EXPECT_EQ(cpu->perm_src, ref.perm_src);
    EXPECT_EQ(ref.offsets[1], 0);
  }
  idx[7] = 6;
  EXPECT_FALSE(MoePermutePlanCpu(s, idx.data()).ok());
  std::vector<float> logits(8);
  EXPECT_FALSE(MoeRouterCpu(MoeShape{4, 4, 4, 2, 3}, logits.data()).ok());  // top_k > experts
}

// The row moves of the LibTorch glue's CPU path: permute puts token t's row at
// each of its k rows; unpermute of a permuted x is (sum_j w[t, j]) x[t]; the
// backward passes are the adjoints (<Px, g> = <x, P^T g>, likewise for U).
TEST(MoePermute, RowMovesAndTheirAdjoints) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const MoeShape s{23, 5, 4, 6, 2};
  const int64_t T = s.tokens, H = s.hidden, K = s.top_k, R = T * K;
  std::vector<int32_t> idx(R);
  std::uniform_int_distribution<int32_t> pick(0, 5);
  for (int64_t t = 0; t < T; ++t) {
    idx[t * K] = pick(rng);
    do idx[t * K + 1] = pick(rng); while (idx[t * K + 1] == idx[t * K]);
  }
  const PermutePlan p = MoePermutePlanRef(s, idx.data());
  auto x = RandomVector(rng, T * H), w = RandomVector(rng, T * K), gxp = RandomVector(rng, R * H),
       gout = RandomVector(rng, T * H);
  std::vector<float> xp(R * H), dx(T * H), out(T * H), dyp(R * H), dw(T * K);
  ASSERT_TRUE(MoePermuteRowsCpu(s, x.data(), p.perm_src.data(), xp.data()).ok());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < K; ++j)
      for (int64_t c = 0; c < H; ++c) ASSERT_EQ(xp[p.perm_pos[t * K + j] * H + c], x[t * H + c]);
  ASSERT_TRUE(MoePermuteRowsBackwardCpu(s, gxp.data(), p.perm_pos.data(), dx.data()).ok());
  double lhs = 0, rhs = 0;
  for (int64_t i = 0; i < R * H; ++i) lhs += double(xp[i]) * gxp[i];
  for (int64_t i = 0; i < T * H; ++i) rhs += double(x[i]) * dx[i];
  EXPECT_NEAR(lhs, rhs, 1e-4 * (1 + std::abs(lhs)));

  ASSERT_TRUE(MoeUnpermuteCpu(s, xp.data(), w.data(), p.perm_pos.data(), out.data()).ok());
  std::vector<float> expect(T * H);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < H; ++c) expect[t * H + c] = (w[t * K] + w[t * K + 1]) * x[t * H + c];
  EXPECT_EQ(CheckClose(out, expect, testing::kFp32), "");
  ASSERT_TRUE(MoeUnpermuteBackwardCpu(s, gout.data(), xp.data(), w.data(), p.perm_pos.data(), dyp.data(), dw.data()).ok());
  lhs = rhs = 0;
  for (int64_t i = 0; i < T * H; ++i) lhs += double(out[i]) * gout[i];
  for (int64_t i = 0; i < R * H; ++i) rhs += double(xp[i]) * dyp[i];  // out is linear in yp
  EXPECT_NEAR(lhs, rhs, 1e-4 * (1 + std::abs(lhs)));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < K; ++j) {
      double d = 0;  // d out / d w[t, j] . gout = <yp[perm_pos], gout[t]>
      for (int64_t c = 0; c < H; ++c) d += double(xp[p.perm_pos[t * K + j] * H + c]) * gout[t * H + c];
      EXPECT_NEAR(dw[t * K + j], d, 1e-4 * (1 + std::abs(d)));
    }

  std::vector<int32_t> bad = p.perm_src;
  bad[3] = static_cast<int32_t>(R);
  EXPECT_FALSE(MoePermuteRowsCpu(s, x.data(), bad.data(), xp.data()).ok());
  EXPECT_FALSE(MoeUnpermuteCpu(s, xp.data(), w.data(), bad.data(), out.data()).ok());
}

TEST(MoeExperts, CpuMatchesOracleAndOracleMatchesFiniteDifferences) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int imbalance = 0; imbalance < 2; ++imbalance) {
    const MoeShape s{23, 12, 10, 5, 2};
    auto x = RandomVector(rng, 23 * 12), wgu = RandomVector(rng, 5 * 12 * 20, -0.5f, 0.5f),
         wd = RandomVector(rng, 5 * 10 * 12, -0.5f, 0.5f), tw = RandomVector(rng, 46, 0.1f, 1.f),
         dout = RandomVector(rng, 23 * 12);
    std::vector<int32_t> idx(46);
    for (int t = 0; t < 23; ++t) {
      idx[2 * t] = imbalance ? 0 : t % 5;      // heavy imbalance: every token on expert 0
      idx[2 * t + 1] = imbalance ? 2 : (t + 2) % 5;  // experts 1, 3, 4 empty
    }
    const PermutePlan p = MoePermutePlanRef(s, idx.data());
    std::vector<float> out_r(23 * 12), out(23 * 12, testing::kPoison);
    MoeExpertsForwardRef(s, p, x.data(), wgu.data(), wd.data(), tw.data(), out_r.data());
    ASSERT_TRUE(MoeExpertsForwardCpu(s, p, x.data(), wgu.data(), wd.data(), tw.data(), out.data()).ok());
    EXPECT_EQ(CheckClose(out, out_r, testing::kFp32), "") << "out";
    std::vector<float> dx_r(x.size()), dgu_r(wgu.size()), dd_r(wd.size()), dw_r(46);
    MoeExpertsBackwardRef(s, p, x.data(), wgu.data(), wd.data(), tw.data(), dout.data(), dx_r.data(), dgu_r.data(),
                          dd_r.data(), dw_r.data());
    std::vector<float> dx(x.size(), testing::kPoison), dgu(wgu.size(), testing::kPoison), dd(wd.size(), testing::kPoison),
        dw(46, testing::kPoison);
    ASSERT_TRUE(MoeExpertsBackwardCpu(s, p, x.data(), wgu.data(), wd.data(), tw.data(), dout.data(), dx.data(),
                                      dgu.data(), dd.data(), dw.data())
                    .ok());
    EXPECT_EQ(CheckClose(dx, dx_r, testing::kFp32), "") << "dx";
    EXPECT_EQ(CheckClose(dgu, dgu_r, testing::kFp32), "") << "dw_gate_up";
    EXPECT_EQ(CheckClose(dd, dd_r, testing::kFp32), "") << "dw_down";
    EXPECT_EQ(CheckClose(dw, dw_r, testing::kFp32), "") << "dtopk_weight";
    // Finite differences on a sample of every input.
    auto loss = [&] {
      std::vector<float> o(23 * 12);
      MoeExpertsForwardRef(s, p, x.data(), wgu.data(), wd.data(), tw.data(), o.data());
      double l = 0;
      for (size_t i = 0; i < o.size(); ++i) l += double(o[i]) * dout[i];
      return l;
    };
    const float h = 1e-2f;
    auto check = [&](std::vector<float>& v, const std::vector<float>& g, const char* name, size_t step) {
      for (size_t i = 0; i < v.size(); i += step) {
        const float saved = v[i];
        v[i] = saved + h;
        const double lp = loss();
        v[i] = saved - h;
        const double lm = loss();
        v[i] = saved;
        const double fd = (lp - lm) / (2 * h);
        EXPECT_NEAR(g[i], fd, 3e-3 + 2e-2 * std::fabs(fd)) << name << "[" << i << "]";
      }
    };
    check(x, dx_r, "dx", 5);
    check(wgu, dgu_r, "dw_gate_up", 23);
    check(wd, dd_r, "dw_down", 11);
    check(tw, dw_r, "dtopk_weight", 3);
  }
}

}  // namespace
}  // namespace tandem::kernels
