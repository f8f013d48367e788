// The checkpoint digest (see checkpoint_digest.h).
#include "workers/checkpoint/checkpoint_digest.h"

namespace tandem::checkpoint {

uint64_t DigestOf(std::span<const std::byte> bytes) { return Xxh64Of(bytes.data(), bytes.size()); }

}  // namespace tandem::checkpoint
