// GPT-2's byte-level alphabet (docs/model.md "Tokenizer"): each of the 256
// byte values is shown as one printable code point, so that a byte-level BPE
// vocabulary can be written as JSON strings. Printable Latin-1 bytes ('!'..'~',
// '¡'..'¬', '®'..'ÿ') stand for themselves; the other 68 bytes, in order, are
// U+0100, U+0101, ... (space is 'Ġ' U+0120, newline 'Ċ' U+010A).
//
// This is the `bytes_to_unicode` table of GPT-2, the Hugging Face ByteLevel
// pre-tokenizer and decoder, and transformers.js alike.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tandem::data {

// The code point that shows byte `b`.
char32_t ByteToCodePoint(uint8_t b);

// The byte that code point `c` shows, or nullopt when `c` is not in the alphabet.
std::optional<uint8_t> CodePointToByte(char32_t c);

// Raw bytes -> their byte-level string (UTF-8 of the alphabet's code points).
std::string BytesToByteLevel(std::string_view bytes);

// Byte-level string (valid UTF-8) -> raw bytes, or nullopt when a code point
// is outside the alphabet.
std::optional<std::string> ByteLevelToBytes(std::string_view byte_level);

}  // namespace tandem::data
