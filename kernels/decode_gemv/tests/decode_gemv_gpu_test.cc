// The decode GEMV on the GPU against the CPU oracle with bf16 emulation, on
// the same bf16-rounded inputs: rows 1-8 (each template instance and the rows
// it masks), widths of one 16-byte vector to past the unrolled loads (two
// columns a warp up to 1024), outputs not a multiple of the block's warps and
// odd ones, with and without the norm, residual and SwiGLU. Outputs poisoned
// before each launch. The sum is exact; the outputs differ from the oracle by
// the order of fp32 sums (an output rounding may flip): within 2% of their
// RMS per element and 0.5% in relative L2. Launched back to back, each of a
// chain of GEMVs reads the output of the one before (the dependent launch
// waits for it). Bad pointers are refused.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/decode_gemv/decode_gemv_cuda.h"
#include "kernels/testing/compare.h"
#include "kernels/testing/cuda_buffers.h"

namespace tandem::kernels {
namespace {

using bf16 = __nv_bfloat16;
using testing::DeviceBuffer;
using testing::RandomBf16;
using Dev = testing::Bf16Buffer;

TEST(DecodeGemvGpu, MatchesOracle) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int32_t rows : {1, 2, 3, 4, 5, 8})
    for (int32_t in : {8, 1024, 2056, 3072, 11008})
      for (int64_t out : {2, 14, 1031})
        for (int variant = 0; variant < 4; ++variant) {
          const bool norm = variant >= 1, residual = variant >= 2, swiglu = variant == 3 || (variant == 0 && out == 14);
          DecodeGemvShape s;
          s.rows = rows;
          s.in = in;
          s.out = out;
          s.norm = norm;
          s.swiglu = swiglu;
          if (!CheckDecodeGemvShape(s).ok()) continue;  // an input too large to stage
          SCOPED_TRACE("rows=" + std::to_string(rows) + " in=" + std::to_string(in) + " out=" + std::to_string(out) +
                       " norm=" + std::to_string(norm) + " residual=" + std::to_string(residual) +
                       " swiglu=" + std::to_string(swiglu));
          const size_t nx = static_cast<size_t>(rows) * in, ny = static_cast<size_t>(rows * DecodeGemvOutCols(s));
          auto x = RandomBf16(rng, nx, -3, 3), r = RandomBf16(rng, nx), nw = RandomBf16(rng, in, 0.5f, 1.5f);
          auto w = RandomBf16(rng, static_cast<size_t>(out) * in, -0.1f, 0.1f);
          std::vector<float> rsum(nx), ry(ny);
          DecodeGemvRef(s, GlueRounding::kBf16, x.data(), residual ? r.data() : nullptr, norm ? nw.data() : nullptr,
                        w.data(), rsum.data(), ry.data());
          Dev dx(x), dr(r), dnw(nw), dw(w), dsum(nx), dy(ny);
          ASSERT_TRUE(DecodeGemvCuda(s, dx.get(), residual ? dr.get() : nullptr, norm ? dnw.get() : nullptr, dw.get(),
                                     residual ? dsum.get() : nullptr, dy.get(), nullptr)
                          .ok());
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          const std::vector<float> y = dy.Get();
          EXPECT_EQ(testing::CheckClose(y, ry, {2e-2 * testing::Rms(ry) + 1e-6, 1.6e-2}), "");
          EXPECT_LT(testing::RelativeL2(y, ry), 5e-3);
          if (residual) EXPECT_EQ(dsum.Get(), rsum);
        }
}

// Twelve square GEMVs launched without a sync, each over the output of the
// one before (normed, with the residual of the one before that, as a decode
// step's projections follow each other), every output poisoned first: each
// must match the oracle over the inputs it was given, so none read its input
// before the kernel writing it had finished.
TEST(DecodeGemvGpu, ChainedLaunchesReadFinishedInputs) {
  const uint64_t seed = testing::FreshSeed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  constexpr int kSteps = 12;
  DecodeGemvShape s;
  s.rows = 1;
  s.in = 2048;
  s.out = 2048;
  const size_t n = static_cast<size_t>(s.in);
  std::vector<std::vector<float>> w(kSteps), nw(kSteps);
  std::vector<std::unique_ptr<Dev>> dw, dnw, ys, sums;
  const std::vector<float> x0 = RandomBf16(rng, n, -3, 3);
  Dev dx0(x0);
  for (int i = 0; i < kSteps; ++i) {
    w[i] = RandomBf16(rng, n * n, -0.05f, 0.05f);
    nw[i] = RandomBf16(rng, n, 0.5f, 1.5f);
    dw.push_back(std::make_unique<Dev>(w[i]));
    dnw.push_back(std::make_unique<Dev>(nw[i]));
    ys.push_back(std::make_unique<Dev>(n));
    sums.push_back(std::make_unique<Dev>(n));
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (int i = 0; i < kSteps; ++i) {
    DecodeGemvShape si = s;
    si.norm = i > 0;
    const bf16* x = i == 0 ? dx0.get() : ys[i - 1]->get();
    const bf16* res = i >= 2 ? ys[i - 2]->get() : nullptr;
    ASSERT_TRUE(DecodeGemvCuda(si, x, res, si.norm ? dnw[i]->get() : nullptr, dw[i]->get(),
                               res != nullptr ? sums[i]->get() : nullptr, ys[i]->get(), nullptr)
                    .ok());
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<std::vector<float>> y(kSteps);
  for (int i = 0; i < kSteps; ++i) y[i] = ys[i]->Get();
  for (int i = 0; i < kSteps; ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    DecodeGemvShape si = s;
    si.norm = i > 0;
    const std::vector<float>& x = i == 0 ? x0 : y[i - 1];
    std::vector<float> rsum(n), ry(n);
    DecodeGemvRef(si, GlueRounding::kBf16, x.data(), i >= 2 ? y[i - 2].data() : nullptr,
                  si.norm ? nw[i].data() : nullptr, w[i].data(), rsum.data(), ry.data());
    EXPECT_EQ(testing::CheckClose(y[i], ry, {2e-2 * testing::Rms(ry) + 1e-6, 1.6e-2}), "");
    EXPECT_LT(testing::RelativeL2(y[i], ry), 5e-3);
    if (i >= 2) EXPECT_EQ(sums[i]->Get(), rsum);
  }
}

TEST(DecodeGemvGpu, RefusesBadArguments) {
  DecodeGemvShape s;
  s.rows = 1;
  s.in = 16;
  s.out = 4;
  Dev x(std::vector<float>(32, 1.f)), w(std::vector<float>(64, 1.f)), y(8);
  EXPECT_TRUE(DecodeGemvCuda(s, x.get(), nullptr, nullptr, w.get(), nullptr, y.get(), nullptr).ok());
  const Status misaligned = DecodeGemvCuda(s, x.get() + 1, nullptr, nullptr, w.get(), nullptr, y.get(), nullptr);
  EXPECT_NE(misaligned.ToString().find("x is not 16-byte aligned"), std::string::npos) << misaligned.ToString();
  EXPECT_FALSE(DecodeGemvCuda(s, x.get(), nullptr, nullptr, nullptr, nullptr, y.get(), nullptr).ok());
  const Status no_norm = DecodeGemvCuda(s, x.get(), x.get(), nullptr, w.get(), y.get(), y.get(), nullptr);
  EXPECT_NE(no_norm.ToString().find("needs the norm"), std::string::npos) << no_norm.ToString();
  s.norm = true;
  EXPECT_FALSE(DecodeGemvCuda(s, x.get(), nullptr, nullptr, w.get(), nullptr, y.get(), nullptr).ok());
  s.rows = 9;
  EXPECT_FALSE(DecodeGemvCuda(s, x.get(), nullptr, x.get(), w.get(), nullptr, y.get(), nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace tandem::kernels
