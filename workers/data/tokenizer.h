// A Hugging Face byte-level BPE tokenizer (tokenizer.json), as the Qwen2 and
// Qwen3 families use, with encode and decode that agree token for token with
// the reference (docs/model.md "Tokenizer"; issue #13 point 4). No LibTorch.
//
// Encode: the text (valid UTF-8; see EncodeOptions) is cut at added tokens
// (leftmost-longest), each piece between them is NFC-normalized (when the
// file says so), split by the pre-tokenizer pattern, and each pre-token is
// byte-pair encoded. Decode: added tokens give their content, other tokens
// their bytes (the ByteLevel decoder); bytes that do not form UTF-8 are
// replaced by U+FFFD, as Hugging Face does.
//
// A Tokenizer is cheap to copy (the tables are shared and immutable, the
// BPE cache is shared and locked) and safe to use from several threads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "workers/data/bpe.h"
#include "workers/data/tokenizer_json.h"

namespace tandem::data {

struct EncodeOptions {
  // When true, special added tokens written in the text ("<|im_end|>") are
  // encoded as ordinary text; non-special added tokens ("<think>") are still
  // matched (Hugging Face's split_special_tokens).
  bool split_special_tokens = false;
  // What ill-formed UTF-8 in the text does: an InvalidArgument error naming
  // the byte offset, or replacement of each bad sequence by U+FFFD.
  enum class InvalidUtf8 { kError, kReplace };
  InvalidUtf8 invalid_utf8 = InvalidUtf8::kError;
};

struct DecodeOptions {
  bool skip_special_tokens = false;  // drop added tokens marked special
};

// The tokens tokenizer_config.json names, resolved to ids (nullopt when the
// config does not name one, or names a string that is not a single token).
struct SpecialTokens {
  std::optional<TokenId> eos, pad, bos;
  std::optional<std::string> eos_text, pad_text, bos_text;
};

class Tokenizer {
 public:
  // From the text of tokenizer.json and, optionally, tokenizer_config.json
  // (empty: none). A token the config names must be one token of the
  // tokenizer, else InvalidArgument.
  static StatusOr<Tokenizer> FromJson(std::string_view tokenizer_json, std::string_view config_json = {});
  // From files; errors are prefixed with the file's path.
  static StatusOr<Tokenizer> FromFiles(const std::filesystem::path& tokenizer_json,
                                       const std::optional<std::filesystem::path>& config_json);
  // dir/tokenizer.json and, when it exists, dir/tokenizer_config.json.
  static StatusOr<Tokenizer> FromDirectory(const std::filesystem::path& dir);

  StatusOr<std::vector<TokenId>> Encode(std::string_view text, const EncodeOptions& options = {}) const;
  // Appends the ids of `text` to *ids. When `ends` is given, appends for each
  // token the byte offset where it ends, in the text after UTF-8 repair and
  // NFC (equal to offsets in `text` when it is valid and already NFC).
  Status EncodeAppend(std::string_view text, const EncodeOptions& options, std::vector<TokenId>* ids,
                      std::vector<size_t>* ends = nullptr) const;

  // InvalidArgument naming the position and id when an id is not a token.
  StatusOr<std::string> Decode(std::span<const TokenId> ids, const DecodeOptions& options = {}) const;
  // The raw bytes of one token (an added token's content), for streaming
  // output a token at a time; nullopt when `id` is not a token.
  std::optional<std::string_view> TokenBytes(TokenId id) const;

  // The id of an added token's content or of a vocabulary token (byte-level
  // string, e.g. "Ġthe"), or nullopt.
  std::optional<TokenId> TokenToId(std::string_view token) const;
  bool IsSpecial(TokenId id) const;
  // Whether encode NFC-normalizes the text between added tokens.
  bool normalizes_nfc() const;
  // One past the largest id (vocabulary and added tokens).
  TokenId vocab_size() const;
  const SpecialTokens& special_tokens() const;
  const TokenizerConfig& config() const;
  const std::vector<AddedToken>& added_tokens() const;

 private:
  struct Impl;
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace tandem::data
