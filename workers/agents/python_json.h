// JSON text as Python's json.dumps(x, ensure_ascii=False) writes it, which is
// what the "tojson" filter of Hugging Face chat templates produces (Qwen's
// tool list in the system prompt; tool-call arguments given as objects):
// ", " between items, ": " after keys, object keys in their given order,
// non-ASCII characters as they are, control characters as \n \t ... or
// \u00XX. Floats as nlohmann writes them (shortest round-trip; Python's repr
// agrees for the values schemas hold). Torch-free.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace tandem::agents {

// `value` must be at most a few hundred levels deep (callers parse with a
// depth bound). Invalid UTF-8 in strings is replaced by U+FFFD.
std::string PythonJsonDumps(const nlohmann::ordered_json& value);

}  // namespace tandem::agents
