// XXH64 (xxh64.h), after the reference specification: four lanes of 8-byte
// rounds over 32-byte stripes, merged, then the tail and the avalanche.
#include "common/xxh64.h"

#include <cstring>

namespace tandem {
namespace {

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t kP3 = 0x165667B19E3779F9ull;
constexpr uint64_t kP4 = 0x85EBCA77C2B2AE63ull;
constexpr uint64_t kP5 = 0x27D4EB2F165667C5ull;

inline uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// Little-endian loads (memcpy: the input need not be aligned). tandem's
// targets are little-endian (x86-64, aarch64).
inline uint64_t Load64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline uint32_t Load32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline uint64_t Round(uint64_t acc, uint64_t input) { return Rotl(acc + input * kP2, 31) * kP1; }
inline uint64_t Merge(uint64_t acc, uint64_t v) { return (acc ^ Round(0, v)) * kP1 + kP4; }

// Consumes whole 32-byte stripes of [p, p + n); returns the bytes consumed.
size_t Stripes(uint64_t v[4], const unsigned char* p, size_t n) {
  const unsigned char* const start = p;
  const unsigned char* const end = p + (n & ~size_t{31});
  uint64_t a = v[0], b = v[1], c = v[2], d = v[3];
  for (; p < end; p += 32) {
    a = Round(a, Load64(p));
    b = Round(b, Load64(p + 8));
    c = Round(c, Load64(p + 16));
    d = Round(d, Load64(p + 24));
  }
  v[0] = a, v[1] = b, v[2] = c, v[3] = d;
  return static_cast<size_t>(p - start);
}

}  // namespace

Xxh64::Xxh64(uint64_t seed) : v_{seed + kP1 + kP2, seed + kP2, seed, seed - kP1}, seed_(seed), buf_{} {}

void Xxh64::Update(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  total_ += n;
  if (buffered_ + n < 32) {
    if (n) std::memcpy(buf_ + buffered_, p, n);
    buffered_ += n;
    return;
  }
  if (buffered_) {
    const size_t fill = 32 - buffered_;
    std::memcpy(buf_ + buffered_, p, fill);
    Stripes(v_, buf_, 32);
    p += fill, n -= fill, buffered_ = 0;
  }
  const size_t used = Stripes(v_, p, n);
  p += used, n -= used;
  if (n) std::memcpy(buf_, p, n);
  buffered_ = n;
}

uint64_t Xxh64::Digest() const {
  uint64_t h;
  if (total_ >= 32) {
    h = Rotl(v_[0], 1) + Rotl(v_[1], 7) + Rotl(v_[2], 12) + Rotl(v_[3], 18);
    for (const uint64_t v : v_) h = Merge(h, v);
  } else {
    h = seed_ + kP5;
  }
  h += total_;
  const unsigned char* p = buf_;
  size_t n = buffered_;
  for (; n >= 8; p += 8, n -= 8) h = Rotl(h ^ Round(0, Load64(p)), 27) * kP1 + kP4;
  if (n >= 4) {
    h = Rotl(h ^ (uint64_t{Load32(p)} * kP1), 23) * kP2 + kP3;
    p += 4, n -= 4;
  }
  for (; n > 0; ++p, --n) h = Rotl(h ^ (*p * kP5), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

uint64_t Xxh64Of(const void* data, size_t n, uint64_t seed) {
  Xxh64 x(seed);
  x.Update(data, n);
  return x.Digest();
}

std::string Xxh64Hex(uint64_t digest) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, digest >>= 4) out[static_cast<size_t>(i)] = kDigits[digest & 15];
  return out;
}

std::optional<uint64_t> ParseXxh64Hex(std::string_view hex) {
  if (hex.size() != 16) return std::nullopt;
  uint64_t v = 0;
  for (const char c : hex) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else return std::nullopt;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  return v;
}

}  // namespace tandem
