// Added tokens (tokenizer.json "added_tokens"; docs/model.md "Tokenizer"):
// strings such as "<|im_start|>" that are cut out of the text before the
// pre-tokenizer runs and map straight to their id.
//
// Matching is leftmost-longest and non-overlapping, as Hugging Face's
// AddedVocabulary does: at the leftmost position where some token starts,
// the longest token there wins. single_word keeps a match only when the
// characters around it are not word characters (letters, numbers, '_');
// lstrip / rstrip make the match swallow the whitespace before / after it.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "workers/data/bpe.h"

namespace tandem::data {

struct AddedToken {
  TokenId id = 0;
  std::string content;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;  // matched in the normalized text (else the raw text)
};

struct AddedTokenMatch {
  size_t begin;  // bytes [begin, end) of the text, stripped whitespace included
  size_t end;
  TokenId id;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // The tokens this matcher looks for (empty contents are ignored).
  explicit AddedTokenMatcher(const std::vector<AddedToken>& tokens);

  bool empty() const { return tokens_.empty(); }
  // The first match in text[from..] (valid UTF-8), or nullopt.
  std::optional<AddedTokenMatch> Next(std::string_view text, size_t from) const;

 private:
  std::vector<AddedToken> tokens_;       // longest first
  std::array<bool, 256> first_byte_{};   // some token starts with this byte
};

}  // namespace tandem::data
