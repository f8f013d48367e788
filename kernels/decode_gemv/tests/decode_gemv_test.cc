// The decode GEMV's shape check and its oracle on hand-computed cases (the
// GPU test checks the kernel against this oracle).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/decode_gemv/decode_gemv.h"

namespace tandem::kernels {
namespace {

DecodeGemvShape Shape(int32_t rows, int32_t in, int64_t out, bool norm = false, bool swiglu = false) {
  DecodeGemvShape s;
  s.rows = rows;
  s.in = in;
  s.out = out;
  s.norm = norm;
  s.swiglu = swiglu;
  return s;
}

TEST(DecodeGemv, ShapeCheck) {
  EXPECT_TRUE(CheckDecodeGemvShape(Shape(1, 8, 1)).ok());
  EXPECT_TRUE(CheckDecodeGemvShape(Shape(8, 2048, 151936, true)).ok());
  EXPECT_TRUE(CheckDecodeGemvShape(Shape(4, 2048, 22016, true, true)).ok());
  EXPECT_TRUE(CheckDecodeGemvShape(Shape(2, 11008, 2048)).ok());
  const struct {
    DecodeGemvShape shape;
    const char* says;
  } bad[] = {
      {Shape(0, 8, 1), "rows must be in [1, 8]"},
      {Shape(9, 8, 1), "rows must be in [1, 8]"},
      {Shape(1, 0, 1), "multiple of 8"},
      {Shape(1, 12, 1), "multiple of 8"},
      {Shape(1, 8, 0), "out must be positive"},
      {Shape(1, 8, 3, false, true), "even with swiglu"},
      {Shape(8, 4096, 8, true), "exceeds the 23552 elements"},
      {Shape(3, 8192, 8), "exceeds the 23552 elements"},
  };
  for (const auto& b : bad) {
    const Status st = CheckDecodeGemvShape(b.shape);
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.ToString().find(b.says), std::string::npos) << st.ToString();
  }
  DecodeGemvShape nan = Shape(1, 8, 1, true);
  nan.eps = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(CheckDecodeGemvShape(nan).ok());
  EXPECT_EQ(DecodeGemvOutCols(Shape(1, 8, 6, false, true)), 3);
  EXPECT_EQ(DecodeGemvOutCols(Shape(1, 8, 6)), 6);
}

// y = x W^T, two rows of x against three rows of W, exactly.
TEST(DecodeGemv, OracleProjects) {
  const std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, -1, 0, 1, 0, -1, 0, 1, 0};
  std::vector<float> w(24, 0.f);
  for (int c = 0; c < 8; ++c) {
    w[c] = 1;                              // row 0: sum
    w[8 + c] = c % 2 == 0 ? 1.f : -1.f;   // row 1: alternating
    w[16 + c] = c == 7 ? 0.5f : 0.f;      // row 2: half the last
  }
  std::vector<float> y(6);
  DecodeGemvRef(Shape(2, 8, 3), GlueRounding::kNone, x.data(), nullptr, nullptr, w.data(), nullptr, y.data());
  EXPECT_EQ(y, (std::vector<float>{36, -4, 4, 0, 0, 0}));
}

// The residual add, RMSNorm and SwiGLU around the projection, with bf16
// rounding: x + residual = 2 everywhere, so rstd = 1/2 (eps 0) and the
// normalised input is the norm weight.
TEST(DecodeGemv, OracleNormsAndSwiglu) {
  const std::vector<float> x(8, 1.5f), residual(8, 0.5f);
  std::vector<float> norm_weight(8), w(16, 0.f);
  for (int c = 0; c < 8; ++c) norm_weight[c] = 0.25f * c;  // sums to 7
  for (int c = 0; c < 8; ++c) {
    w[c] = 1;         // gate: 7
    w[8 + c] = 0.5f;  // up: 3.5
  }
  DecodeGemvShape s = Shape(1, 8, 2, true, true);
  s.eps = 0;
  std::vector<float> sum(8), y(1);
  DecodeGemvRef(s, GlueRounding::kBf16, x.data(), residual.data(), norm_weight.data(), w.data(), sum.data(), y.data());
  EXPECT_EQ(sum, std::vector<float>(8, 2.f));
  const float silu = RoundToBf16(static_cast<float>(7.0 / (1.0 + std::exp(-7.0))));
  EXPECT_EQ(y[0], RoundToBf16(silu * 3.5f));
  // Without the residual the input is normalised as it is: rstd = 1/1.5.
  std::vector<float> y2(1);
  DecodeGemvRef(s, GlueRounding::kNone, x.data(), nullptr, norm_weight.data(), w.data(), nullptr, y2.data());
  EXPECT_NEAR(y2[0], 7.0 / (1.0 + std::exp(-7.0)) * 3.5, 1e-5);
}

}  // namespace
}  // namespace tandem::kernels
