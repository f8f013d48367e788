// Byte sizes in a job spec (schemas/jobspec.schema.json, $defs/byte_size;
// docs/jobspec.md "handoff"): an integer number of bytes, or a string of a
// decimal number and a unit, e.g. "80GiB", "512MiB", "1.5TiB", "1000000B".
// Units: B; KiB, MiB, GiB, TiB (powers of 1024); KB, MB, GB, TB (powers of
// 1000). A fraction is rounded down to whole bytes.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/status.h"

namespace tandem::spec {

// The largest size a spec may give: 2^53 bytes (8 PiB), the largest integer
// that every JSON reader holds exactly.
inline constexpr uint64_t kMaxByteSize = uint64_t{1} << 53;

// The schema's pattern: ^[0-9]+(\.[0-9]+)?(B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)$
bool IsByteSizeText(std::string_view text);

// The bytes of `text`. kInvalidArgument when it does not match the pattern,
// comes to 0 bytes, or exceeds kMaxByteSize, with a message that a spec
// error can carry as it is: "expected at least 1 byte, got \"0GiB\"".
StatusOr<uint64_t> ParseByteSize(std::string_view text);

}  // namespace tandem::spec
