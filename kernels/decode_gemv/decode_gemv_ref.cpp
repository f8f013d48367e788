// The decode GEMV's shape check and oracle (decode_gemv.h): the fused
// glue's oracles around plain fp64 dot products.
#include <cmath>
#include <string>
#include <vector>

#include "kernels/decode_gemv/decode_gemv.h"

namespace tandem::kernels {

Status CheckDecodeGemvShape(const DecodeGemvShape& s) {
  if (s.rows < 1 || s.rows > kDecodeGemvMaxRows)
    return InvalidArgument("decode gemv: rows must be in [1, " + std::to_string(kDecodeGemvMaxRows) + "], got " +
                           std::to_string(s.rows));
  if (s.in <= 0 || s.in % 8 != 0)
    return InvalidArgument("decode gemv: in must be a positive multiple of 8, got " + std::to_string(s.in));
  if (s.out <= 0 || (s.swiglu && s.out % 2 != 0))
    return InvalidArgument("decode gemv: out must be positive" + std::string(s.swiglu ? " and even with swiglu" : "") +
                           ", got " + std::to_string(s.out));
  if (static_cast<int64_t>(s.rows) * s.in > kDecodeGemvMaxStagedElements)
    return InvalidArgument("decode gemv: an input of " + std::to_string(s.rows) + " x " + std::to_string(s.in) +
                           " exceeds the " + std::to_string(kDecodeGemvMaxStagedElements) +
                           " elements staged in shared memory");
  if (!std::isfinite(s.eps) || s.eps < 0) return InvalidArgument("decode gemv: eps must be finite and >= 0");
  return Status::Ok();
}

void DecodeGemvRef(const DecodeGemvShape& s, GlueRounding r, const float* x, const float* residual,
                   const float* norm_weight, const float* weight, float* sum_out, float* y) {
  const int64_t k = s.in, rows = s.rows;
  std::vector<float> a(x, x + rows * k);
  if (s.norm) RmsNormForwardRef({rows, s.in, s.eps}, r, x, residual, norm_weight, sum_out, a.data());
  const auto round = [r](double v) {
    return r == GlueRounding::kBf16 ? RoundToBf16(static_cast<float>(v)) : static_cast<float>(v);
  };
  std::vector<float> z(static_cast<size_t>(rows * s.out));
  for (int64_t m = 0; m < rows; ++m)
    for (int64_t n = 0; n < s.out; ++n) {
      double acc = 0;
      for (int64_t c = 0; c < k; ++c) acc += static_cast<double>(a[m * k + c]) * weight[n * k + c];
      z[m * s.out + n] = round(acc);
    }
  if (!s.swiglu) {
    std::copy(z.begin(), z.end(), y);
    return;
  }
  const int64_t inter = s.out / 2;
  for (int64_t m = 0; m < rows; ++m)
    SwigluForwardRef(inter, r, z.data() + m * s.out, z.data() + m * s.out + inter, y + m * inter);
}

}  // namespace tandem::kernels
