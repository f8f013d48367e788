// The byte-level tokenizer for small models (docs/model.md "Tokenizer",
// "The byte-level tokenizer"): 256 byte tokens (id = byte value) and a few
// special tokens after them, no merges, no normalizer. It is written as a
// real tokenizer.json + tokenizer_config.json in the Hugging Face format (a
// BPE model with an empty merge list over GPT-2's byte alphabet), so the
// `tokenizers` / `transformers` libraries can load it, and it is read back
// by Tokenizer::FromDirectory like any other. decode(encode(x)) == x for all
// valid UTF-8 x.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "common/status.h"

namespace tandem::data {

struct ByteTokenizerOptions {
  // Added as special tokens with ids 256, 257, ...
  std::vector<std::string> special_tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  std::string eos_token = "<|im_end|>";     // "" for none; else one of special_tokens
  std::string pad_token = "<|endoftext|>";  // "" for none; else one of special_tokens
  bool chatml_template = true;  // write a ChatML chat_template (needs <|im_start|> and <|im_end|>)
};

struct TokenizerFiles {
  std::string tokenizer_json;
  std::string tokenizer_config_json;
};

// The two files' text. InvalidArgument for empty, repeated or non-UTF-8
// special tokens, an eos/pad token that is not one of them, or a ChatML
// template without its tokens.
StatusOr<TokenizerFiles> ByteTokenizerFiles(const ByteTokenizerOptions& options = {});

// Writes dir/tokenizer.json and dir/tokenizer_config.json (creating dir).
Status WriteByteTokenizer(const std::filesystem::path& dir, const ByteTokenizerOptions& options = {});

}  // namespace tandem::data
