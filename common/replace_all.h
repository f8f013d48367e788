// Every occurrence of a key in a text replaced (left to right, never inside
// a replacement): "{rank}" in a port-file pattern, "{question}" in a
// workflow's words.
#pragma once

#include <string>
#include <string_view>

namespace tandem {

inline std::string ReplaceAll(std::string text, std::string_view key, std::string_view value) {
  if (key.empty()) return text;
  for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + value.size()))
    text.replace(at, key.size(), value);
  return text;
}

}  // namespace tandem
