// The dot product of two fp32 rows, for the CPU kernels' inner loops
// (tree attention's scores, the LM head's logits). Eight running sums in a
// fixed pattern (element i goes to sum i mod 8 of its block), added
// pairwise at the end: the order is fixed, so the result is the same on
// every run and thread count, and the sums are independent, so the
// compiler vectorises the loop without reassociating anything (one running
// sum is a chain of dependent adds: latency-bound, about 8x slower).
// Header-only (kernels/standalone needs nothing extra).
#pragma once

#include <cstdint>

namespace tandem::kernels {

inline float Dot(const float* a, const float* b, int64_t n) {
  float s[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) s[j] += a[i + j] * b[i + j];
  }
  for (int j = 0; i < n; ++i, ++j) s[j] += a[i] * b[i];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

}  // namespace tandem::kernels
