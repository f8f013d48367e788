// UTF-8 text as the tokenizer sees it (docs/model.md "Tokenizer"): checking
// and repairing UTF-8, NFC normalization (ICU) and the character classes the
// pre-tokenizer patterns use (\p{L}, \p{N}, \s).
//
// Contract: every function takes bytes from outside and never crashes on them.
// The classes follow the Hugging Face tokenizers library (Oniguruma): \p{L} is
// the general category L (Lu Ll Lt Lm Lo), \p{N} is N (Nd Nl No) and \s is the
// Unicode White_Space property (which holds U+0085 and not U+FEFF).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tandem::data {

// Byte offset of the first ill-formed UTF-8 sequence in `text` (overlong
// forms, surrogates and code points above U+10FFFF are ill-formed), or npos.
size_t FindInvalidUtf8(std::string_view text);

// `text` with each maximal ill-formed subsequence replaced by U+FFFD (the
// W3C/Unicode "maximal subpart" practice, as Python's errors="replace").
std::string ReplaceInvalidUtf8(std::string_view text);

// NFC form of valid UTF-8 `text`. Text already in NFC (the common case) is
// detected by a quick check and copied unchanged.
StatusOr<std::string> NormalizeNfc(std::string_view text);

// Decodes the code point starting at text[*pos] and advances *pos past it.
// The text must be valid UTF-8 and *pos < text.size().
// True when valid UTF-8 `text` is already in NFC (ICU's quick check,
// resolved exactly when it answers "maybe").
bool IsNfc(std::string_view text);

char32_t NextCodePoint(std::string_view text, size_t* pos);

// The classes of the split patterns.
bool IsLetter(char32_t c);      // \p{L}
bool IsNumber(char32_t c);      // \p{N}
bool IsWhitespace(char32_t c);  // \s
// Whether `c` is assigned a character in this ICU's Unicode version (tests
// use it: the classes of unassigned code points change between versions).
bool IsAssigned(char32_t c);
// Letters, numbers and '_', as Hugging Face's added tokens take "word"
// characters for single_word.
bool IsWordCharacter(char32_t c);

// UTF-8 encoding of code point `c` (a valid scalar value) appended to `out`.
void AppendUtf8(char32_t c, std::string* out);

}  // namespace tandem::data
