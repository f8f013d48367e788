// The fused decoder glue on CPU: each oracle's backward against finite
// differences of its forward; the CPU implementation (what the CPU model
// runs) against the oracles over shapes; the bf16 emulation rounds where it
// says (outputs are bf16 values); bad shapes refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "kernels/fused/fused.h"
#include "kernels/testing/compare.h"

namespace tandem::kernels {
namespace {

using testing::CheckClose;
using testing::RandomVector;
constexpr GlueRounding kF = GlueRounding::kNone;

double Dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

// Central differences of L(in) = <forward(in), v> at a few coordinates of
// `in` against the analytic gradient `grad`.
void ExpectFiniteDifferences(std::vector<float>& in, const std::vector<float>& grad,
                             const std::function<double()>& loss, const char* what) {
  const float h = 1e-2f;
  for (size_t i = 0; i < in.size(); i += std::max<size_t>(1, in.size() / 23)) {
    const float keep = in[i];
    in[i] = keep + h;
    const double up = loss();
    in[i] = keep - h;
    const double down = loss();
    in[i] = keep;
    const double fd = (up - down) / (2.0 * h);
    EXPECT_NEAR(grad[i], fd, 2e-3 + 2e-2 * std::fabs(fd)) << what << " at " << i;
  }
}

TEST(FusedRef, RmsNormBackwardIsTheForwardsGradient) {
  std::mt19937_64 rng(testing::FreshSeed());
  for (bool residual : {false, true}) {
    const RmsNormShape s{5, 12, 1e-6f};
    auto x = RandomVector(rng, 60), r = RandomVector(rng, 60), w = RandomVector(rng, 12, 0.5f, 1.5f);
    auto v = RandomVector(rng, 60), vh = RandomVector(rng, 60);
    std::vector<float> sum(60), y(60), gin(60), gw(12);
    auto loss = [&] {
      RmsNormForwardRef(s, kF, x.data(), residual ? r.data() : nullptr, w.data(), sum.data(), y.data());
      return Dot(y, v) + (residual ? Dot(sum, vh) : 0.0);
    };
    loss();
    RmsNormBackwardRef(s, kF, residual ? sum.data() : x.data(), w.data(), v.data(), residual ? vh.data() : nullptr,
                       gin.data(), gw.data());
    const std::vector<float> gin_copy = gin, gw_copy = gw;
    ExpectFiniteDifferences(x, gin_copy, loss, "grad x");
    if (residual) ExpectFiniteDifferences(r, gin_copy, loss, "grad residual");
    ExpectFiniteDifferences(w, gw_copy, loss, "grad weight");
  }
}

TEST(FusedRef, QkNormRotaryBackwardIsTheForwardsGradient) {
  std::mt19937_64 rng(testing::FreshSeed());
  const QkRotaryShape s{3, 2, 8, 1e-6f};
  auto x = RandomVector(rng, 48), w = RandomVector(rng, 8, 0.5f, 1.5f), v = RandomVector(rng, 48);
  std::vector<float> cos(24), sin(24), y(48), gx(48), gw(8);
  for (int t = 0; t < 3; ++t)
    for (int i = 0; i < 8; ++i) cos[t * 8 + i] = std::cos(0.7f * t * (i % 4 + 1)), sin[t * 8 + i] = std::sin(0.7f * t * (i % 4 + 1));
  auto loss = [&] {
    QkNormRotaryForwardRef(s, kF, x.data(), w.data(), cos.data(), sin.data(), y.data());
    return Dot(y, v);
  };
  QkNormRotaryBackwardRef(s, kF, x.data(), w.data(), cos.data(), sin.data(), v.data(), gx.data(), gw.data());
  const std::vector<float> gx_copy = gx, gw_copy = gw;
  ExpectFiniteDifferences(x, gx_copy, loss, "grad x");
  ExpectFiniteDifferences(w, gw_copy, loss, "grad weight");
}

TEST(FusedRef, SwigluBackwardIsTheForwardsGradient) {
  std::mt19937_64 rng(testing::FreshSeed());
  auto g = RandomVector(rng, 31, -4, 4), u = RandomVector(rng, 31), v = RandomVector(rng, 31);
  std::vector<float> y(31), gg(31), gu(31);
  auto loss = [&] {
    SwigluForwardRef(31, kF, g.data(), u.data(), y.data());
    return Dot(y, v);
  };
  SwigluBackwardRef(31, kF, g.data(), u.data(), v.data(), gg.data(), gu.data());
  const std::vector<float> gg_copy = gg, gu_copy = gu;
  ExpectFiniteDifferences(g, gg_copy, loss, "grad gate");
  ExpectFiniteDifferences(u, gu_copy, loss, "grad up");
}

void ExpectBf16Values(const std::vector<float>& v, const char* what) {
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], RoundToBf16(v[i])) << what << " at " << i;
}

TEST(FusedRef, Bf16EmulationRoundsTheOutputs) {
  std::mt19937_64 rng(testing::FreshSeed());
  const RmsNormShape s{4, 64, 1e-6f};
  auto x = RandomVector(rng, 256), r = RandomVector(rng, 256), w = RandomVector(rng, 64), g = RandomVector(rng, 256);
  std::vector<float> sum(256), y(256), gin(256), gw(64);
  RmsNormForwardRef(s, GlueRounding::kBf16, x.data(), r.data(), w.data(), sum.data(), y.data());
  RmsNormBackwardRef(s, GlueRounding::kBf16, sum.data(), w.data(), g.data(), nullptr, gin.data(), gw.data());
  ExpectBf16Values(sum, "sum");
  ExpectBf16Values(y, "y");
  ExpectBf16Values(gin, "grad");
  EXPECT_EQ(RoundToBf16(1.0f + 1.0f / 256), 1.0f);             // a tie (half an ulp) rounds to even
  EXPECT_EQ(RoundToBf16(1.0f + 3.0f / 256), 1.0f + 1.0f / 64);  // and up to the even neighbour
  EXPECT_EQ(RoundToBf16(1.0f + 1.0f / 512), 1.0f);             // a quarter ulp rounds down
  EXPECT_TRUE(std::isnan(RoundToBf16(NAN)));
}

TEST(FusedCpu, RmsNormMatchesOracle) {
  std::mt19937_64 rng(testing::FreshSeed());
  for (int64_t rows : {0, 1, 37, 300})
    for (int32_t cols : {2, 66, 256})
      for (bool residual : {false, true}) {
        SCOPED_TRACE("rows=" + std::to_string(rows) + " cols=" + std::to_string(cols) + " residual=" +
                     std::to_string(residual));
        const RmsNormShape s{rows, cols, 1e-5f};
        const size_t n = static_cast<size_t>(rows * cols);
        auto x = RandomVector(rng, n, -2, 2), r = RandomVector(rng, n), w = RandomVector(rng, static_cast<size_t>(cols));
        auto gy = RandomVector(rng, n), gh = RandomVector(rng, n);
        std::vector<float> sum(n), y(n), gin(n), gw(static_cast<size_t>(cols));
        std::vector<float> rsum(n), ry(n), rgin(n), rgw(static_cast<size_t>(cols));
        const float* res = residual ? r.data() : nullptr;
        ASSERT_TRUE(RmsNormForwardCpu(s, x.data(), res, w.data(), residual ? sum.data() : nullptr, y.data(), 3).ok());
        RmsNormForwardRef(s, kF, x.data(), res, w.data(), rsum.data(), ry.data());
        EXPECT_EQ(CheckClose(y, ry, testing::kFp32), "");
        if (residual) EXPECT_EQ(CheckClose(sum, rsum, testing::kFp32), "");
        const float* h = residual ? rsum.data() : x.data();
        ASSERT_TRUE(RmsNormBackwardCpu(s, h, w.data(), gy.data(), residual ? gh.data() : nullptr, gin.data(),
                                       gw.data(), 3).ok());
        RmsNormBackwardRef(s, kF, h, w.data(), gy.data(), residual ? gh.data() : nullptr, rgin.data(), rgw.data());
        EXPECT_EQ(CheckClose(gin, rgin, {1e-4, 1e-3}), "");
        EXPECT_EQ(CheckClose(gw, rgw, {1e-4, 1e-3}), "");
      }
}

TEST(FusedCpu, QkNormRotaryMatchesOracle) {
  std::mt19937_64 rng(testing::FreshSeed());
  for (int64_t tokens : {0, 1, 29})
    for (int32_t heads : {1, 3})
      for (int32_t dim : {4, 12, 128}) {
        SCOPED_TRACE("tokens=" + std::to_string(tokens) + " heads=" + std::to_string(heads) + " dim=" +
                     std::to_string(dim));
        const QkRotaryShape s{tokens, heads, dim, 1e-6f};
        const size_t n = static_cast<size_t>(tokens * heads * dim), nt = static_cast<size_t>(tokens * dim);
        auto x = RandomVector(rng, n, -3, 3), w = RandomVector(rng, static_cast<size_t>(dim), 0.5f, 1.5f);
        auto cos = RandomVector(rng, nt), sin = RandomVector(rng, nt), gy = RandomVector(rng, n);
        std::vector<float> y(n), ry(n), gx(n), rgx(n), gw(static_cast<size_t>(dim)), rgw(static_cast<size_t>(dim));
        ASSERT_TRUE(QkNormRotaryForwardCpu(s, x.data(), w.data(), cos.data(), sin.data(), y.data(), 2).ok());
        QkNormRotaryForwardRef(s, kF, x.data(), w.data(), cos.data(), sin.data(), ry.data());
        EXPECT_EQ(CheckClose(y, ry, testing::kFp32), "");
        ASSERT_TRUE(QkNormRotaryBackwardCpu(s, x.data(), w.data(), cos.data(), sin.data(), gy.data(), gx.data(),
                                            gw.data(), 2).ok());
        QkNormRotaryBackwardRef(s, kF, x.data(), w.data(), cos.data(), sin.data(), gy.data(), rgx.data(), rgw.data());
        EXPECT_EQ(CheckClose(gx, rgx, {1e-4, 1e-3}), "");
        EXPECT_EQ(CheckClose(gw, rgw, {1e-4, 1e-3}), "");
      }
}

TEST(FusedCpu, SwigluMatchesOracle) {
  std::mt19937_64 rng(testing::FreshSeed());
  for (int64_t n : {0, 1, 1001}) {
    auto g = RandomVector(rng, static_cast<size_t>(n), -6, 6), u = RandomVector(rng, static_cast<size_t>(n));
    auto gy = RandomVector(rng, static_cast<size_t>(n));
    std::vector<float> y(static_cast<size_t>(n)), ry(y), gg(y), rgg(y), gu(y), rgu(y);
    ASSERT_TRUE(SwigluForwardCpu(n, g.data(), u.data(), y.data(), 2).ok());
    SwigluForwardRef(n, kF, g.data(), u.data(), ry.data());
    EXPECT_EQ(CheckClose(y, ry, testing::kFp32), "");
    ASSERT_TRUE(SwigluBackwardCpu(n, g.data(), u.data(), gy.data(), gg.data(), gu.data(), 2).ok());
    SwigluBackwardRef(n, kF, g.data(), u.data(), gy.data(), rgg.data(), rgu.data());
    EXPECT_EQ(CheckClose(gg, rgg, testing::kFp32), "");
    EXPECT_EQ(CheckClose(gu, rgu, testing::kFp32), "");
  }
}

TEST(FusedCpu, BadShapesAreRefused) {
  float buf[8] = {};
  EXPECT_FALSE(RmsNormForwardCpu({2, 3, 1e-6f}, buf, nullptr, buf, nullptr, buf).ok());  // odd cols
  EXPECT_FALSE(RmsNormForwardCpu({-1, 2, 1e-6f}, buf, nullptr, buf, nullptr, buf).ok());
  EXPECT_FALSE(RmsNormForwardCpu({1, 2, NAN}, buf, nullptr, buf, nullptr, buf).ok());
  EXPECT_FALSE(QkNormRotaryForwardCpu({1, 1, 6, 1e-6f}, buf, buf, buf, buf, buf).ok());  // head_dim % 4
  EXPECT_FALSE(QkNormRotaryForwardCpu({1, 0, 4, 1e-6f}, buf, buf, buf, buf, buf).ok());
  EXPECT_FALSE(SwigluForwardCpu(-1, buf, buf, buf).ok());
  const Status st = RmsNormForwardCpu({2, 3, 1e-6f}, buf, nullptr, buf, nullptr, buf);
  EXPECT_NE(st.ToString().find("cols=3"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace tandem::kernels
