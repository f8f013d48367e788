// The decode GEMV on the GPU against the CPU oracle with bf16 emulation, on
// the same bf16-rounded inputs: rows 1-8 (each template instance and the rows
// it masks), widths of one 16-byte vector to past the unrolled loads (two
// columns a warp up to 1024), outputs not a multiple of the block's warps and
// odd ones, with and without the norm, residual and SwiGLU. Outputs poisoned
// before each launch. The sum is exact; the outputs differ from the oracle by
// the order of fp32 sums (an output rounding may flip): within 2% of their
// RMS per element and 0.5% in relative L2. Bad pointers are refused.
#include <gtest/gtest.h>

#include <string>

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
    for (int32_t in : {8, 1024, 2056, 3072})
      for (int64_t out : {2, 14, 1031})
        for (int variant = 0; variant < 4; ++variant) {
          const bool norm = variant >= 1, residual = variant >= 2, swiglu = variant == 3 || (variant == 0 && out == 14);
          DecodeGemvShape s;
          s.rows = rows;
          s.in = in;
          s.out = out;
          s.norm = norm;
          s.swiglu = swiglu;
          if (!CheckDecodeGemvShape(s).ok()) continue;  // a norm over too many elements
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
