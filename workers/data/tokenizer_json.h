// Reading Hugging Face tokenizer files (docs/model.md "Tokenizer"):
// tokenizer.json (the byte-level BPE subset Qwen2/Qwen3 and GPT-2 use) and
// the few keys of tokenizer_config.json the workers need.
//
// Both files are hostile input: the JSON is parsed with a bound on nesting
// (common/bounded_json.h), every value is type-checked, and an error names
// the key path and what was expected ("model.merges[12]: expected a string
// \"a b\" or a pair [\"a\", \"b\"], got number"). Anything outside the
// accepted subset is refused with the list of what is supported, never
// silently ignored (except "truncation" and "padding", which encoding never
// applies, and "version").
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "workers/data/added_tokens.h"
#include "workers/data/bpe.h"
#include "workers/data/pretokenizer.h"

namespace tandem::data {

struct TokenizerSpec {
  BpeSpec bpe;
  std::vector<AddedToken> added_tokens;
  bool nfc = false;                   // normalizer NFC
  std::optional<SplitPattern> split;  // none: ByteLevel(use_regex=false) alone, the text is one piece
};

// Parses tokenizer.json text.
StatusOr<TokenizerSpec> ParseTokenizerJson(std::string_view text);

struct TokenizerConfig {
  std::optional<std::string> eos_token;
  std::optional<std::string> pad_token;
  std::optional<std::string> bos_token;
  std::optional<std::string> chat_template;  // the Jinja source, when present (never run)
  bool add_bos_token = false;
};

// Parses tokenizer_config.json text. The token keys may be a string, null,
// or an object with "content" (the AddedToken form); chat_template may be a
// string or a list of {"name", "template"} (the one named "default", else
// the first).
StatusOr<TokenizerConfig> ParseTokenizerConfig(std::string_view text);

}  // namespace tandem::data
