// The fused decoder glue on the GPU against the CPU oracle with bf16
// emulation, on the same bf16-rounded inputs, over shapes (the models' 1024
// and 128 rows, widths off the warp's 64-column stride, odd element counts,
// zero rows). Outputs poisoned before each launch. The forward outputs agree
// up to rare flips of an intermediate rounding (fp32 against fp64 before a
// rounding): within 0.2% in relative L2; gradients within 1% of their RMS
// per element and 0.5% in relative L2.
#include <gtest/gtest.h>

#include <string>

#include "kernels/fused/fused_cuda.h"
#include "kernels/testing/compare.h"
#include "kernels/testing/cuda_buffers.h"

namespace tandem::kernels {
namespace {

using bf16 = __nv_bfloat16;
using testing::DeviceBuffer;
using testing::RandomBf16;
using Dev = testing::Bf16Buffer;
constexpr GlueRounding kB = GlueRounding::kBf16;

// A one-ulp flip of an intermediate (the normed row in rotary, then scaled
// by cos or sin) shows in an output that cancels as an absolute error of
// about 2^-7 of the intermediates' size: the absolute term is 2% of the RMS.
void ExpectOutput(const std::vector<float>& out, const std::vector<float>& ref, const char* what) {
  EXPECT_EQ(testing::CheckClose(out, ref, {2e-2 * testing::Rms(ref) + 1e-6, 1.6e-2}), "") << what;
  EXPECT_LT(testing::RelativeL2(out, ref), 2e-3) << what;
}
void ExpectGrad(const std::vector<float>& out, const std::vector<float>& ref, const char* what) {
  EXPECT_EQ(testing::CheckClose(out, ref, {1e-2 * testing::Rms(ref) + 1e-6, 1.6e-2}), "") << what;
  EXPECT_LT(testing::RelativeL2(out, ref), 5e-3) << what;
}

std::vector<float> GetF(const DeviceBuffer<float>& b) {
  std::vector<float> h;
  EXPECT_EQ(b.Download(h), cudaSuccess);
  return h;
}

TEST(FusedGpu, RmsNormMatchesOracle) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int64_t rows : {0, 1, 333, 4099})
    for (int32_t cols : {2, 130, 1024, 4096})
      for (bool residual : {false, true}) {
        SCOPED_TRACE("rows=" + std::to_string(rows) + " cols=" + std::to_string(cols) + " residual=" +
                     std::to_string(residual));
        const RmsNormShape s{rows, cols, 1e-6f};
        const size_t n = static_cast<size_t>(rows * cols);
        auto x = RandomBf16(rng, n, -3, 3), r = RandomBf16(rng, n), w = RandomBf16(rng, static_cast<size_t>(cols));
        auto gy = RandomBf16(rng, n), gh = RandomBf16(rng, n);
        std::vector<float> rsum(n), ry(n), rgin(n), rgw(static_cast<size_t>(cols));
        RmsNormForwardRef(s, kB, x.data(), residual ? r.data() : nullptr, w.data(), rsum.data(), ry.data());
        const std::vector<float>& h = residual ? rsum : x;
        RmsNormBackwardRef(s, kB, h.data(), w.data(), gy.data(), residual ? gh.data() : nullptr, rgin.data(),
                           rgw.data());
        Dev dx(x), dr(r), dw(w), dgy(gy), dgh(gh), dsum(n), dy(n), dgin(n);
        ASSERT_TRUE(RmsNormForwardCuda(s, dx.get(), residual ? dr.get() : nullptr, dw.get(),
                                       residual ? dsum.get() : nullptr, dy.get(), nullptr).ok());
        ExpectOutput(dy.Get(), ry, "y");
        if (residual) ExpectOutput(dsum.Get(), rsum, "sum");
        Dev dh(h);
        DeviceBuffer<float> dgw(static_cast<size_t>(cols));
        ASSERT_EQ(dgw.Poison(), cudaSuccess);
        const size_t ws_bytes = RmsNormBackwardWorkspaceBytes(s);
        DeviceBuffer<char> ws(ws_bytes);
        ASSERT_TRUE(RmsNormBackwardCuda(s, dh.get(), dw.get(), dgy.get(), residual ? dgh.get() : nullptr,
                                        dgin.get(), dgw.get(), ws.get(), ws_bytes, nullptr).ok());
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        if (rows > 0) ExpectGrad(dgin.Get(), rgin, "grad in");
        ExpectGrad(GetF(dgw), rgw, "grad weight");
      }
}

TEST(FusedGpu, QkNormRotaryMatchesOracle) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int64_t tokens : {0, 1, 517})
    for (int32_t heads : {1, 8, 16})
      for (int32_t dim : {4, 12, 64, 128, 256}) {
        SCOPED_TRACE("tokens=" + std::to_string(tokens) + " heads=" + std::to_string(heads) + " dim=" +
                     std::to_string(dim));
        const QkRotaryShape s{tokens, heads, dim, 1e-6f};
        const size_t n = static_cast<size_t>(tokens * heads * dim), nt = static_cast<size_t>(tokens * dim);
        auto x = RandomBf16(rng, n, -3, 3), w = RandomBf16(rng, static_cast<size_t>(dim), 0.5f, 1.5f);
        auto cos = RandomBf16(rng, nt), sin = RandomBf16(rng, nt), gy = RandomBf16(rng, n);
        std::vector<float> ry(n), rgx(n), rgw(static_cast<size_t>(dim));
        QkNormRotaryForwardRef(s, kB, x.data(), w.data(), cos.data(), sin.data(), ry.data());
        QkNormRotaryBackwardRef(s, kB, x.data(), w.data(), cos.data(), sin.data(), gy.data(), rgx.data(), rgw.data());
        Dev dx(x), dw(w), dc(cos), ds(sin), dgy(gy), dy(n), dgx(n);
        ASSERT_TRUE(QkNormRotaryForwardCuda(s, dx.get(), dw.get(), dc.get(), ds.get(), dy.get(), nullptr).ok());
        ExpectOutput(dy.Get(), ry, "y");
        DeviceBuffer<float> dgw(static_cast<size_t>(dim));
        ASSERT_EQ(dgw.Poison(), cudaSuccess);
        const size_t ws_bytes = QkNormRotaryBackwardWorkspaceBytes(s);
        DeviceBuffer<char> ws(ws_bytes);
        ASSERT_TRUE(QkNormRotaryBackwardCuda(s, dx.get(), dw.get(), dc.get(), ds.get(), dgy.get(), dgx.get(),
                                             dgw.get(), ws.get(), ws_bytes, nullptr).ok());
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        if (tokens > 0) ExpectGrad(dgx.Get(), rgx, "grad x");
        ExpectGrad(GetF(dgw), rgw, "grad weight");
      }
}

TEST(FusedGpu, SwigluMatchesOracle) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int64_t n : {1, 2, 1001, 3 * 1024 * 1024 + 1}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const size_t un = static_cast<size_t>(n);
    auto g = RandomBf16(rng, un, -6, 6), u = RandomBf16(rng, un), gy = RandomBf16(rng, un);
    std::vector<float> ry(un), rgg(un), rgu(un);
    SwigluForwardRef(n, kB, g.data(), u.data(), ry.data());
    SwigluBackwardRef(n, kB, g.data(), u.data(), gy.data(), rgg.data(), rgu.data());
    Dev dg(g), du(u), dgy(gy), dy(un), dgg(un), dgu(un);
    ASSERT_TRUE(SwigluForwardCuda(n, dg.get(), du.get(), dy.get(), nullptr).ok());
    ExpectOutput(dy.Get(), ry, "y");
    ASSERT_TRUE(SwigluBackwardCuda(n, dg.get(), du.get(), dgy.get(), dgg.get(), dgu.get(), nullptr).ok());
    ExpectGrad(dgg.Get(), rgg, "grad gate");
    ExpectGrad(dgu.Get(), rgu, "grad up");
  }
}

TEST(FusedGpu, BadArgumentsAreRefused) {
  DeviceBuffer<bf16> b(64);
  EXPECT_FALSE(RmsNormForwardCuda({2, 3, 1e-6f}, b.get(), nullptr, b.get(), nullptr, b.get(), nullptr).ok());
  EXPECT_FALSE(RmsNormForwardCuda({2, 4, 1e-6f}, b.get() + 1, nullptr, b.get(), nullptr, b.get(), nullptr).ok());
  EXPECT_FALSE(RmsNormForwardCuda({2, 4, 1e-6f}, b.get(), b.get(), b.get(), nullptr, b.get(), nullptr).ok());
  EXPECT_FALSE(RmsNormBackwardCuda({2, 4, 1e-6f}, b.get(), b.get(), b.get(), nullptr, b.get(),
                                   reinterpret_cast<float*>(b.get()), nullptr, 0, nullptr).ok());  // no workspace
  EXPECT_FALSE(QkNormRotaryForwardCuda({1, 1, 6, 1e-6f}, b.get(), b.get(), b.get(), b.get(), b.get(), nullptr).ok());
  EXPECT_FALSE(SwigluForwardCuda(4, nullptr, b.get(), b.get(), nullptr).ok());
}

}  // namespace
}  // namespace tandem::kernels
