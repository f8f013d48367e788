// Chunked LM-head loss on CPU: the oracle against finite differences and
// against log_softmax written out; the CPU implementation (what workers call
// without a GPU) against the oracle over shapes (vocab off the chunk size,
// rows in several pairs or none, temperature), and bad input rejected.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/lm_head_loss/lm_head_loss.h"
#include "kernels/testing/compare.h"

namespace tandem::kernels {
namespace {

using testing::CheckClose;
using testing::FreshSeed;
using testing::RandomVector;

struct Problem {
  LmHeadLossShape s;
  std::vector<float> hidden, weight, g_lp, g_ent;
  std::vector<int32_t> rows, labels;
};

Problem Make(std::mt19937_64& rng, int64_t N, int32_t H, int32_t V, int64_t M, float temp) {
  Problem p;
  p.s = LmHeadLossShape{N, H, V, M, temp};
  p.hidden = RandomVector(rng, N * H, -1, 1);
  p.weight = RandomVector(rng, int64_t(V) * H, -1, 1);
  std::uniform_int_distribution<int32_t> row(0, static_cast<int32_t>(N) - 1), lab(0, V - 1);
  for (int64_t i = 0; i < M; ++i) {
    // The first rows get several pairs (a fork), some rows none.
    p.rows.push_back(i < 6 ? static_cast<int32_t>(i / 3) : row(rng));
    p.labels.push_back(lab(rng));
  }
  p.g_lp = RandomVector(rng, M);
  p.g_ent = RandomVector(rng, N);
  return p;
}

TEST(LmHeadLossRef, MatchesLogSoftmaxAndFiniteDifferences) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  Problem p = Make(rng, 5, 6, 11, 9, 0.7f);
  std::vector<float> lp(9), ent(5), lse(5);
  LmHeadLossForwardRef(p.s, p.hidden.data(), p.weight.data(), p.rows.data(), p.labels.data(), lp.data(), ent.data(),
                       lse.data());
  // log_softmax written out for pair 0.
  {
    const int r = p.rows[0];
    std::vector<double> z(11);
    double mx = -INFINITY, sum = 0, e = 0;
    for (int v = 0; v < 11; ++v) {
      for (int x = 0; x < 6; ++x) z[v] += double(p.hidden[r * 6 + x]) * p.weight[v * 6 + x];
      z[v] /= 0.7;
      mx = std::max(mx, z[v]);
    }
    for (double zv : z) sum += std::exp(zv - mx);
    for (double zv : z) {
      const double q = std::exp(zv - mx) / sum;
      e -= q * std::log(q);
    }
    EXPECT_NEAR(lp[0], z[p.labels[0]] - mx - std::log(sum), 1e-5);
    EXPECT_NEAR(ent[r], e, 1e-5);
  }
  std::vector<float> gh(p.hidden.size()), gw(p.weight.size());
  LmHeadLossBackwardRef(p.s, p.hidden.data(), p.weight.data(), p.rows.data(), p.labels.data(), p.g_lp.data(),
                        p.g_ent.data(), gh.data(), gw.data());
  auto loss = [&]() {
    LmHeadLossForwardRef(p.s, p.hidden.data(), p.weight.data(), p.rows.data(), p.labels.data(), lp.data(), ent.data(),
                         nullptr);
    double l = 0;
    for (size_t i = 0; i < lp.size(); ++i) l += double(lp[i]) * p.g_lp[i];
    for (size_t r = 0; r < ent.size(); ++r) l += double(ent[r]) * p.g_ent[r];
    return l;
  };
  const float h = 1e-2f;
  auto check = [&](std::vector<float>& x, const std::vector<float>& g, const char* name) {
    for (size_t i = 0; i < x.size(); ++i) {
      const float saved = x[i];
      x[i] = saved + h;
      const double lp_ = loss();
      x[i] = saved - h;
      const double lm = loss();
      x[i] = saved;
      const double fd = (lp_ - lm) / (2 * h);
      EXPECT_NEAR(g[i], fd, 2e-3 + 2e-2 * std::fabs(fd)) << name << "[" << i << "]";
    }
  };
  check(p.hidden, gh, "grad_hidden");
  check(p.weight, gw, "grad_weight");
}

TEST(LmHeadLossCpu, MatchesOracleOverShapes) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  struct C { int64_t N; int32_t H, V; int64_t M; float t; };
  for (const C& c : {C{70, 32, 1000, 90, 1.f}, C{130, 16, 333, 200, 0.6f}, C{3, 8, 5, 0, 1.3f}, C{65, 24, 257, 64, 1.f}}) {
    SCOPED_TRACE("N=" + std::to_string(c.N) + " V=" + std::to_string(c.V));
    Problem p = Make(rng, c.N, c.H, c.V, c.M, c.t);
    std::vector<float> lp_r(c.M), ent_r(c.N), lse_r(c.N), gh_r(p.hidden.size()), gw_r(p.weight.size());
    LmHeadLossForwardRef(p.s, p.hidden.data(), p.weight.data(), p.rows.data(), p.labels.data(), lp_r.data(),
                         ent_r.data(), lse_r.data());
    LmHeadLossBackwardRef(p.s, p.hidden.data(), p.weight.data(), p.rows.data(), p.labels.data(), p.g_lp.data(),
                          p.g_ent.data(), gh_r.data(), gw_r.data());
    std::vector<float> lp(c.M, testing::kPoison), ent(c.N, testing::kPoison), lse(c.N, testing::kPoison);
    ASSERT_TRUE(LmHeadLossForwardCpu(p.s, p.hidden.data(), p.weight.data(), p.rows.data(), p.labels.data(), lp.data(),
                                     ent.data(), lse.data())
                    .ok());
    EXPECT_EQ(CheckClose(lp, lp_r, testing::kFp32), "") << "logprob";
    EXPECT_EQ(CheckClose(ent, ent_r, testing::kFp32), "") << "entropy";
    std::vector<float> gh(gh_r.size(), testing::kPoison), gw(gw_r.size(), testing::kPoison);
    ASSERT_TRUE(LmHeadLossBackwardCpu(p.s, p.hidden.data(), p.weight.data(), p.rows.data(), p.labels.data(),
                                      lse.data(), ent.data(), p.g_lp.data(), p.g_ent.data(), gh.data(), gw.data())
                    .ok());
    EXPECT_EQ(CheckClose(gh, gh_r, testing::kFp32), "") << "grad_hidden";
    EXPECT_EQ(CheckClose(gw, gw_r, testing::kFp32), "") << "grad_weight";
  }
}

TEST(LmHeadLossCpu, RejectsBadInput) {
  std::vector<float> h(4 * 2), w(3 * 2), out(8);
  std::vector<int32_t> rows{0, 4}, labels{0, 1};
  EXPECT_FALSE(LmHeadLossForwardCpu({4, 2, 3, 2, 1.f}, h.data(), w.data(), rows.data(), labels.data(), out.data(),
                                    nullptr, nullptr)
                   .ok());  // row 4 out of range
  rows[1] = 1;
  labels[1] = 3;
  EXPECT_FALSE(LmHeadLossForwardCpu({4, 2, 3, 2, 1.f}, h.data(), w.data(), rows.data(), labels.data(), out.data(),
                                    nullptr, nullptr)
                   .ok());  // label 3 out of range
  EXPECT_FALSE(LmHeadLossForwardCpu({4, 2, 3, 0, 0.f}, h.data(), w.data(), rows.data(), labels.data(), out.data(),
                                    nullptr, nullptr)
                   .ok());  // temperature 0
}

}  // namespace
}  // namespace tandem::kernels
