// XXH64 (xxh64.h) against the values libxxhash 0.8.1 (XXH64) gives for the
// same inputs, one-shot and streamed in random splits.
#include "common/xxh64.h"

#include <gtest/gtest.h>

#include <random>
#include <string_view>
#include <vector>

namespace tandem {
namespace {

std::vector<unsigned char> Pattern(size_t n) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>(i * 31);
  return v;
}

TEST(Xxh64Test, MatchesTheReferenceValues) {
  EXPECT_EQ(Xxh64Of("", 0), 0xef46db3751d8e999ull);
  EXPECT_EQ(Xxh64Of("abc", 3), 0x44bc2cf5ad770999ull);
  const std::vector<unsigned char> p = Pattern(1000);
  EXPECT_EQ(Xxh64Of(p.data(), 1000), 0xb1280f6428126532ull);   // stripes, 8-byte and byte tails
  EXPECT_EQ(Xxh64Of(p.data(), 37, 7), 0xe626e1195d7c1abaull);  // a seed, the 4-byte tail
}

TEST(Xxh64Test, StreamingEqualsOneShotForAnySplit) {
  std::mt19937_64 rng(std::random_device{}());
  std::vector<unsigned char> data(4099);
  for (auto& c : data) c = static_cast<unsigned char>(rng());
  for (const size_t n : {size_t{0}, size_t{1}, size_t{31}, size_t{32}, size_t{33}, size_t{64}, size_t{1000}, data.size()}) {
    const uint64_t want = Xxh64Of(data.data(), n, 42);
    Xxh64 s(42);
    for (size_t i = 0; i < n;) {
      const size_t k = std::min<size_t>(n - i, 1 + rng() % 70);
      s.Update(data.data() + i, k);
      i += k;
    }
    EXPECT_EQ(s.Digest(), want) << n << " bytes";
    EXPECT_EQ(s.Digest(), want) << "Digest changed the state";
  }
}

TEST(Xxh64Test, OneFlippedBitChangesTheDigest) {
  std::vector<unsigned char> p = Pattern(4096);
  const uint64_t before = Xxh64Of(p.data(), p.size());
  p[2049] ^= 4;
  EXPECT_NE(Xxh64Of(p.data(), p.size()), before);
}

}  // namespace
}  // namespace tandem
