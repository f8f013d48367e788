// Leftmost-longest matching of added tokens (added_tokens.h).
#include "workers/data/added_tokens.h"

#include <algorithm>

#include "workers/data/unicode_text.h"

namespace tandem::data {
namespace {

// Start of the code point that ends just before `pos` (pos > 0).
size_t PrevCodePointStart(std::string_view text, size_t pos) {
  do --pos;
  while (pos > 0 && (static_cast<uint8_t>(text[pos]) & 0xC0) == 0x80);
  return pos;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens) {
  for (const auto& t : tokens)
    if (!t.content.empty()) tokens_.push_back(t);
  std::stable_sort(tokens_.begin(), tokens_.end(),
                   [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  for (const auto& t : tokens_) first_byte_[static_cast<uint8_t>(t.content[0])] = true;
}

std::optional<AddedTokenMatch> AddedTokenMatcher::Next(std::string_view text, size_t from) const {
  if (tokens_.empty()) return std::nullopt;
  for (size_t pos = from; pos < text.size(); ++pos) {
    if (!first_byte_[static_cast<uint8_t>(text[pos])]) continue;
    if ((static_cast<uint8_t>(text[pos]) & 0xC0) == 0x80) continue;  // inside a code point
    const AddedToken* hit = nullptr;
    for (const auto& t : tokens_) {  // longest first
      if (text.compare(pos, t.content.size(), t.content) == 0) {
        hit = &t;
        break;
      }
    }
    if (hit == nullptr) continue;
    size_t begin = pos, end = pos + hit->content.size();
    if (hit->single_word) {
      size_t after = end;
      const bool word_before = begin > 0 && [&] {
        size_t p = PrevCodePointStart(text, begin);
        return IsWordCharacter(NextCodePoint(text, &p));
      }();
      const bool word_after = end < text.size() && IsWordCharacter(NextCodePoint(text, &after));
      if (word_before || word_after) {
        pos = end - 1;  // as Hugging Face: the rejected match's text is not searched again
        continue;
      }
    }
    if (hit->lstrip) {
      while (begin > from) {
        size_t p = PrevCodePointStart(text, begin);
        const size_t start = p;
        if (!IsWhitespace(NextCodePoint(text, &p))) break;
        begin = start;
      }
    }
    if (hit->rstrip) {
      while (end < text.size()) {
        size_t p = end;
        if (!IsWhitespace(NextCodePoint(text, &p))) break;
        end = p;
      }
    }
    return AddedTokenMatch{begin, end, hit->id};
  }
  return std::nullopt;
}

}  // namespace tandem::data
