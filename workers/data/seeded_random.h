// A small, portable, seeded random source for the data sets and the prompt
// sampler (docs/model.md, "Data sets and rewards"): SplitMix64, the same
// numbers on every compiler and standard library (std::shuffle and the
// std distributions are not specified bit for bit), so a seed names the same
// problems and the same order everywhere.
#pragma once

#include <cstdint>

namespace tandem::data {

// One SplitMix64 output for `x` (a good 64-bit mixer on its own).
constexpr uint64_t Mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

class SeededRandom {
 public:
  explicit SeededRandom(uint64_t seed) : state_(seed) {}
  // Two keys, mixed (seed and index; seed and epoch).
  SeededRandom(uint64_t a, uint64_t b) : state_(Mix64(a) ^ Mix64(b ^ 0xD1B54A32D192ED03ull)) {}

  uint64_t Next() {
    state_ += 0x9E3779B97F4A7C15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  // Uniform in [0, n), n > 0, without modulo bias (rejection).
  uint64_t Below(uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x = Next();
    while (x >= limit) x = Next();
    return x % n;
  }

  // Uniform in [lo, hi], lo <= hi.
  int64_t Between(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(Below(static_cast<uint64_t>(hi - lo) + 1));
  }

 private:
  uint64_t state_;
};

}  // namespace tandem::data
