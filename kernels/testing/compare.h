// Tolerances as code for kernel tests (|out - ref| <= atol + rtol*|ref|,
// rtol per dtype), fresh random inputs, poisoning. Header-only, used by the
// CPU and GPU tests of every kernel in kernels/.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace tandem::kernels::testing {

struct Tolerance {
  double atol;
  double rtol;
};
// fp32 arithmetic against an fp64 oracle.
inline constexpr Tolerance kFp32{2e-5, 2e-4};
// bf16 inputs/outputs with fp32 accumulation, against an fp32/fp64 oracle on
// the same (bf16-rounded) inputs: one bf16 rounding of the output is 2^-8.
inline constexpr Tolerance kBf16{2e-3, 1.6e-2};

// Empty when every element satisfies |out-ref| <= atol + rtol*|ref| (NaN never
// does); otherwise a description of the count and the worst element.
inline std::string CheckClose(const float* out, const float* ref, size_t n, Tolerance tol) {
  size_t bad = 0, worst = 0;
  double worst_excess = -1;
  for (size_t i = 0; i < n; ++i) {
    const double diff = std::fabs(static_cast<double>(out[i]) - ref[i]);
    const double limit = tol.atol + tol.rtol * std::fabs(static_cast<double>(ref[i]));
    const bool ok = std::isfinite(out[i]) && diff <= limit;
    if (!ok) {
      ++bad;
      const double excess = std::isfinite(diff) ? diff - limit : INFINITY;
      if (excess > worst_excess) worst_excess = excess, worst = i;
    }
  }
  if (bad == 0) return {};
  return std::to_string(bad) + " of " + std::to_string(n) + " elements out of tolerance; worst at " +
         std::to_string(worst) + ": out=" + std::to_string(out[worst]) + " ref=" + std::to_string(ref[worst]);
}

inline std::string CheckClose(const std::vector<float>& out, const std::vector<float>& ref, Tolerance tol) {
  if (out.size() != ref.size()) return "size mismatch";
  return CheckClose(out.data(), ref.data(), out.size(), tol);
}

// A fresh seed per run, printed by the test on failure.
inline uint64_t FreshSeed() { return (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}(); }

inline std::vector<float> RandomVector(std::mt19937_64& rng, size_t n, float lo = -1.f, float hi = 1.f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Poison value for outputs: a NaN, so an unwritten element fails CheckClose.
inline constexpr float kPoison = NAN;

}  // namespace tandem::kernels::testing
