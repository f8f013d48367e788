// XXH3-64 through libxxhash (see checkpoint_digest.h).
#include "workers/checkpoint/checkpoint_digest.h"

#include <xxhash.h>

#include <new>
#include <utility>

namespace tandem::checkpoint {

Digester::Digester() {
  state_ = XXH3_createState();
  if (state_ == nullptr) throw std::bad_alloc();
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_));
}

Digester::~Digester() {
  if (state_ != nullptr) XXH3_freeState(static_cast<XXH3_state_t*>(state_));
}

Digester::Digester(Digester&& other) noexcept : state_(std::exchange(other.state_, nullptr)) {}

Digester& Digester::operator=(Digester&& other) noexcept {
  if (this != &other) {
    if (state_ != nullptr) XXH3_freeState(static_cast<XXH3_state_t*>(state_));
    state_ = std::exchange(other.state_, nullptr);
  }
  return *this;
}

void Digester::Update(std::span<const std::byte> bytes) {
  if (bytes.empty()) return;
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), bytes.data(), bytes.size());
}

uint64_t Digester::Digest() const { return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state_)); }

uint64_t DigestOf(std::span<const std::byte> bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

std::string DigestToHex(uint64_t digest) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, digest >>= 4) out[static_cast<size_t>(i)] = kDigits[digest & 15];
  return out;
}

std::optional<uint64_t> DigestFromHex(std::string_view hex) {
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

}  // namespace tandem::checkpoint
