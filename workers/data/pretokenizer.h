// The split patterns of byte-level BPE tokenizers (docs/model.md
// "Tokenizer"), each a hand-written matcher over code points that finds the
// same pieces as the regular expression it stands for under leftmost-first
// (backtracking) semantics, as Hugging Face's Split pre-tokenizer with
// behavior "Isolated" does. std::regex has no Unicode classes, hence no
// regex engine: each pattern is known by its exact text and anything else is
// refused by the loader.
//
//   kQwen2: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|
//           ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   kGpt2:  's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// (?i:...) folds ASCII letters only (as transformers.js does; Oniguruma
// would also let U+017F 'ſ' match 's').
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

namespace tandem::data {

enum class SplitPattern {
  kQwen2,  // Qwen2/Qwen2.5/Qwen3 tokenizer.json Split pattern
  kGpt2,   // the ByteLevel pre-tokenizer's own pattern (use_regex=true)
};

// The exact regular expression text of `pattern`, as tokenizer.json writes it.
std::string_view SplitPatternRegex(SplitPattern pattern);

// The pattern whose text is exactly `regex`, or nullopt.
std::optional<SplitPattern> RecognizeSplitPattern(std::string_view regex);

// A piece of the text: bytes [begin, end).
struct PreToken {
  size_t begin;
  size_t end;
};

// Appends the pieces of `text` (valid UTF-8) to *out; they cover the text
// in order, with no gaps, none empty.
void SplitPreTokens(SplitPattern pattern, std::string_view text, std::vector<PreToken>* out);

}  // namespace tandem::data
