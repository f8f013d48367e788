// Byte-pair encoding of one pre-token (bpe.h).
#include "workers/data/bpe.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <limits>
#include <mutex>
#include <queue>

#include "workers/data/byte_level.h"
#include "workers/data/unicode_text.h"

namespace tandem::data {
namespace {

constexpr size_t kCacheShards = 16;
constexpr size_t kCacheEntriesPerShard = 1 << 14;
constexpr size_t kMaxCachedWordBytes = 64;
constexpr size_t kScanMaxSymbols = 48;  // longer words merge through a heap

uint64_t PairKey(TokenId a, TokenId b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

std::string Quoted(std::string_view s) {
  std::string out = "'";
  out += ReplaceInvalidUtf8(s.substr(0, 80));
  if (s.size() > 80) out += "...";
  return out + "'";
}

}  // namespace

struct BpeModel::Cache {
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<TokenId>, StringHash, std::equal_to<>> words;
  };
  std::array<Shard, kCacheShards> shards;
};

StatusOr<BpeModel> BpeModel::Build(const BpeSpec& spec) {
  BpeModel m;
  TokenId max_id = -1;
  for (const auto& [token, id] : spec.vocab) {
    if (id < 0 || id >= kMaxTokenId)
      return InvalidArgument("model.vocab[" + Quoted(token) + "]: id " + std::to_string(id) + " outside [0, " +
                             std::to_string(kMaxTokenId) + ")");
    max_id = std::max(max_id, id);
  }
  const size_t density_limit = 2 * spec.vocab.size() + 65536;
  if (max_id >= 0 && static_cast<size_t>(max_id) >= density_limit)
    return InvalidArgument("model.vocab: largest id " + std::to_string(max_id) + " for " +
                           std::to_string(spec.vocab.size()) + " tokens (ids must be below 2 * tokens + 65536)");
  const size_t n = static_cast<size_t>(max_id + 1);
  m.tokens_.assign(n, {});
  m.bytes_.assign(n, {});
  m.present_.assign(n, false);
  m.ids_.reserve(spec.vocab.size());
  for (const auto& [token, id] : spec.vocab) {
    if (token.empty()) return InvalidArgument("model.vocab: empty token (id " + std::to_string(id) + ")");
    const auto u = static_cast<size_t>(id);
    if (m.present_[u])
      return InvalidArgument("model.vocab: id " + std::to_string(id) + " given to both " + Quoted(m.tokens_[u]) +
                             " and " + Quoted(token));
    if (!m.ids_.emplace(token, id).second) return InvalidArgument("model.vocab: token " + Quoted(token) + " twice");
    m.present_[u] = true;
    m.tokens_[u] = token;
    // The ByteLevel decoder: alphabet characters become their bytes; a token
    // with any other character decodes to its own UTF-8 (as Hugging Face does).
    auto raw = ByteLevelToBytes(token);
    m.bytes_[u] = raw ? std::move(*raw) : token;
  }
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    AppendUtf8(ByteToCodePoint(static_cast<uint8_t>(b)), &ch);
    m.byte_id_[static_cast<size_t>(b)] = m.IdOf(ch).value_or(-1);
    char hex[8];
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    m.fallback_id_[static_cast<size_t>(b)] = m.IdOf(hex).value_or(-1);
  }
  if (spec.unk_token) {
    m.unk_ = m.IdOf(*spec.unk_token);
    if (!m.unk_) return InvalidArgument("model.unk_token: " + Quoted(*spec.unk_token) + " is not in model.vocab");
  }
  m.fuse_unk_ = spec.fuse_unk;
  for (int b = 0; b < 256; ++b) {
    const auto u = static_cast<size_t>(b);
    if (m.byte_id_[u] >= 0 || (spec.byte_fallback && m.fallback_id_[u] >= 0) || m.unk_) continue;
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02X", b);
    return InvalidArgument(std::string("model.vocab: no token for byte ") + hex +
                           " (its byte-level character), no byte_fallback token and no unk_token: text holding it "
                           "could not be encoded");
  }
  if (!spec.byte_fallback) m.fallback_id_.fill(-1);
  if (spec.merges.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    return InvalidArgument("model.merges: too many merges");
  m.merges_.reserve(spec.merges.size());
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const auto& [a, b] = spec.merges[rank];
    const std::string where = "model.merges[" + std::to_string(rank) + "] (" + Quoted(a) + ", " + Quoted(b) + ")";
    const auto ia = m.IdOf(a), ib = m.IdOf(b);
    if (!ia) return InvalidArgument(where + ": " + Quoted(a) + " is not in model.vocab");
    if (!ib) return InvalidArgument(where + ": " + Quoted(b) + " is not in model.vocab");
    const auto merged = m.IdOf(a + b);
    if (!merged) return InvalidArgument(where + ": the merged token " + Quoted(a + b) + " is not in model.vocab");
    m.merges_[PairKey(*ia, *ib)] = Merge{static_cast<int32_t>(rank), *merged};  // a repeated pair: the last rank wins
  }
  m.cache_ = std::make_shared<Cache>();
  return m;
}

const std::string* BpeModel::TokenOf(TokenId id) const {
  if (id < 0 || id >= id_end() || !present_[static_cast<size_t>(id)]) return nullptr;
  return &tokens_[static_cast<size_t>(id)];
}

const std::string* BpeModel::BytesOf(TokenId id) const {
  if (id < 0 || id >= id_end() || !present_[static_cast<size_t>(id)]) return nullptr;
  return &bytes_[static_cast<size_t>(id)];
}

std::optional<TokenId> BpeModel::IdOf(std::string_view token) const {
  const auto it = ids_.find(token);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

const BpeModel::Merge* BpeModel::FindMerge(TokenId a, TokenId b) const {
  const auto it = merges_.find(PairKey(a, b));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::InitialSymbols(std::string_view word, std::vector<TokenId>* syms) const {
  syms->clear();
  syms->reserve(word.size());
  bool last_was_unk = false;
  for (const char ch : word) {
    const auto b = static_cast<uint8_t>(ch);
    if (byte_id_[b] >= 0) {
      syms->push_back(byte_id_[b]);
      last_was_unk = false;
    } else if (fallback_id_[b] >= 0) {
      syms->push_back(fallback_id_[b]);
      last_was_unk = false;
    } else {  // Build() made sure there is an unk token
      if (!(fuse_unk_ && last_was_unk)) syms->push_back(*unk_);
      last_was_unk = true;
    }
  }
}

void BpeModel::MergeByScan(std::vector<TokenId>* syms) const {
  auto& s = *syms;
  if (s.size() < 2) return;
  constexpr int32_t kNone = std::numeric_limits<int32_t>::max();
  std::vector<int32_t> rank(s.size() - 1);
  const auto rank_at = [&](size_t i) {
    const Merge* mg = FindMerge(s[i], s[i + 1]);
    return mg ? mg->rank : kNone;
  };
  for (size_t i = 0; i + 1 < s.size(); ++i) rank[i] = rank_at(i);
  while (!rank.empty()) {
    const auto best = std::min_element(rank.begin(), rank.end());  // the first of equal ranks: leftmost
    if (*best == kNone) break;
    const auto i = static_cast<size_t>(best - rank.begin());
    s[i] = FindMerge(s[i], s[i + 1])->merged;
    s.erase(s.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    rank.erase(rank.begin() + static_cast<std::ptrdiff_t>(i));
    if (i > 0) rank[i - 1] = rank_at(i - 1);
    if (i < rank.size()) rank[i] = rank_at(i);
  }
}

void BpeModel::MergeByHeap(std::vector<TokenId>* syms) const {
  auto& s = *syms;
  const size_t n = s.size();
  if (n < 2) return;
  // Symbols as a linked list over their first positions; a merge keeps the
  // left symbol (with the new id) and removes the right one.
  std::vector<int64_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int64_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int64_t>(i + 1) : -1;
  }
  struct Candidate {
    int32_t rank;
    size_t left;
    TokenId left_id, right_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  const auto push = [&](size_t left) {
    if (next[left] < 0) return;
    const auto right = static_cast<size_t>(next[left]);
    if (const Merge* mg = FindMerge(s[left], s[right])) heap.push({mg->rank, left, s[left], s[right]});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    if (!alive[c.left] || next[c.left] < 0) continue;
    const auto right = static_cast<size_t>(next[c.left]);
    if (s[c.left] != c.left_id || s[right] != c.right_id) continue;  // stale
    s[c.left] = FindMerge(c.left_id, c.right_id)->merged;
    alive[right] = false;
    next[c.left] = next[right];
    if (next[right] >= 0) prev[static_cast<size_t>(next[right])] = static_cast<int64_t>(c.left);
    if (prev[c.left] >= 0) push(static_cast<size_t>(prev[c.left]));
    push(c.left);
  }
  size_t out = 0;
  for (size_t i = 0; i < n; ++i)
    if (alive[i]) s[out++] = s[i];
  s.resize(out);
}

void BpeModel::MergeWord(std::string_view word, bool use_heap, std::vector<TokenId>* out) const {
  std::vector<TokenId> syms;
  InitialSymbols(word, &syms);
  if (use_heap) MergeByHeap(&syms);
  else MergeByScan(&syms);
  out->insert(out->end(), syms.begin(), syms.end());
}

void BpeModel::EncodeWord(std::string_view word, std::vector<TokenId>* out) const {
  if (word.empty()) return;
  if (word.size() == 1 && byte_id_[static_cast<uint8_t>(word[0])] >= 0) {  // one symbol: nothing to merge
    out->push_back(byte_id_[static_cast<uint8_t>(word[0])]);
    return;
  }
  if (word.size() > kMaxCachedWordBytes) {
    MergeWord(word, /*use_heap=*/true, out);
    return;
  }
  auto& shard = cache_->shards[StringHash{}(word) % kCacheShards];
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    const auto it = shard.words.find(word);
    if (it != shard.words.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<TokenId> ids;
  MergeWord(word, /*use_heap=*/word.size() > kScanMaxSymbols, &ids);
  out->insert(out->end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(shard.mu);
  if (shard.words.size() >= kCacheEntriesPerShard) shard.words.clear();
  shard.words.emplace(word, std::move(ids));
}

}  // namespace tandem::data
