// Byte-pair encoding of one pre-token (docs/model.md "Tokenizer"): the
// "model" part of a Hugging Face tokenizer.json of type BPE, over GPT-2's
// byte-level alphabet (byte_level.h).
//
// A word (the raw bytes of one pre-token) starts as one symbol per byte; the
// adjacent pair with the lowest merge rank (the leftmost on a tie) is merged
// until no pair has a merge, exactly as Hugging Face's BPE does. Bytes whose
// alphabet character is not in the vocabulary become <0xXX> tokens
// (byte_fallback) or the unk token (fused when fuse_unk); a vocabulary that
// can do neither for some byte is refused at build time, so encoding never
// drops text. Results for words up to 64 bytes are cached (thread-safe:
// EncodeWord may be called from several threads at once).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tandem::data {

using TokenId = int32_t;

// Largest token id a vocabulary may use, and how sparse it may be: ids must
// be below both kMaxTokenId and 2 * (number of tokens) + 65536, so a hostile
// file cannot make the id tables huge.
inline constexpr TokenId kMaxTokenId = 1 << 24;

struct BpeSpec {
  std::vector<std::pair<std::string, TokenId>> vocab;         // byte-level token -> id
  std::vector<std::pair<std::string, std::string>> merges;  // by rank
  std::optional<std::string> unk_token;
  bool fuse_unk = false;
  bool byte_fallback = false;
};

class BpeModel {
 public:
  // Checks the spec (ids in range and unique, merges naming vocabulary
  // tokens whose concatenation is a token, every byte encodable) and builds
  // the tables. Errors name the vocabulary entry or merge index.
  static StatusOr<BpeModel> Build(const BpeSpec& spec);

  // Appends the ids of the word (raw bytes) to *out.
  void EncodeWord(std::string_view word, std::vector<TokenId>* out) const;

  // The merge loop without the cache: by a scan of adjacent pairs (short
  // words) or a heap (long ones). Exposed so tests can hold both to each other.
  void MergeWord(std::string_view word, bool use_heap, std::vector<TokenId>* out) const;

  // The vocabulary token (byte-level string) of `id`, or nullptr.
  const std::string* TokenOf(TokenId id) const;
  // The raw bytes token `id` decodes to (ByteLevel decoder), or nullptr.
  const std::string* BytesOf(TokenId id) const;
  std::optional<TokenId> IdOf(std::string_view token) const;
  // One past the largest vocabulary id.
  TokenId id_end() const { return static_cast<TokenId>(tokens_.size()); }
  size_t merge_count() const { return merges_.size(); }

 private:
  struct Merge {
    int32_t rank;
    TokenId merged;
  };
  struct Cache;
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  const Merge* FindMerge(TokenId a, TokenId b) const;
  void InitialSymbols(std::string_view word, std::vector<TokenId>* syms) const;
  void MergeByScan(std::vector<TokenId>* syms) const;
  void MergeByHeap(std::vector<TokenId>* syms) const;

  std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>> ids_;
  std::vector<std::string> tokens_;  // by id; "" = no token (a hole)
  std::vector<std::string> bytes_;   // by id: what each token decodes to
  std::vector<bool> present_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::array<TokenId, 256> byte_id_{};  // -1 where the byte's character is not a token
  std::array<TokenId, 256> fallback_id_{};
  std::optional<TokenId> unk_;
  bool fuse_unk_ = false;
  std::shared_ptr<Cache> cache_;
};

}  // namespace tandem::data
