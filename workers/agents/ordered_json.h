// JSON from outside, parsed keeping each object's key order (the tools'
// definitions, as the chat template writes them back; tool-call arguments)
// with bounds that make it safe on hostile text. Torch-free.
//
// nlohmann::ordered_json looks a key up by a linear scan, so an object of n
// keys costs O(n^2) to build: 16 MiB of "{"k1":0,"k2":0,...}" would hold a
// thread for hours. A SAX pass first (linear, no allocation beyond a stack
// of counters) refuses an object with more than `max_keys` keys; then
// ParseJsonBounded (common/bounded_json.h) bounds the depth and refuses NUL
// bytes and invalid JSON.
#pragma once

#include <cstddef>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tandem::agents {

inline constexpr size_t kMaxObjectKeys = 4096;

// InvalidArgument: "JSON nested deeper than ...", "an object holds more than
// 4096 keys (the limit)", "not valid JSON".
StatusOr<nlohmann::ordered_json> ParseOrderedJson(std::string_view text, size_t max_depth,
                                                  size_t max_keys = kMaxObjectKeys);

}  // namespace tandem::agents
