// The byte-level BPE tokenizer: loading, encode, decode (tokenizer.h).
#include "workers/data/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "workers/data/added_tokens.h"
#include "workers/data/pretokenizer.h"
#include "workers/data/unicode_text.h"

namespace tandem::data {
namespace {

constexpr std::uintmax_t kMaxFileBytes = std::uintmax_t{1} << 30;

StatusOr<std::string> ReadFile(const std::filesystem::path& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return NotFound(path.string() + ": " + ec.message());
  if (size > kMaxFileBytes) return InvalidArgument(path.string() + ": " + std::to_string(size) + " bytes (limit 1 GiB)");
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path.string() + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return DataLoss(path.string() + ": read failed");
  return ss.str();
}

}  // namespace

struct Tokenizer::Impl {
  BpeModel bpe;
  std::vector<AddedToken> added;
  std::unordered_map<TokenId, size_t> added_by_id;
  // Matchers for the raw text (normalized=false tokens) and the normalized
  // pieces (normalized=true), each with and without the special tokens.
  AddedTokenMatcher raw_all, raw_plain, norm_all, norm_plain;
  bool nfc = false;
  std::optional<SplitPattern> split;
  TokenId vocab_size = 0;
  TokenizerConfig config;
  SpecialTokens special;

  // A piece between added tokens: normalize, cut at normalized added tokens,
  // pre-tokenize, byte-pair encode. `base` is the piece's offset in the
  // normalized stream; returns the normalized length.
  StatusOr<size_t> EncodePiece(std::string_view piece, bool split_special, size_t base, std::vector<TokenId>* ids,
                               std::vector<size_t>* ends) const;
  void EncodeWords(std::string_view text, size_t base, std::vector<TokenId>* ids, std::vector<size_t>* ends) const;
};

void Tokenizer::Impl::EncodeWords(std::string_view text, size_t base, std::vector<TokenId>* ids,
                                  std::vector<size_t>* ends) const {
  thread_local std::vector<PreToken> words;
  words.clear();
  if (split) SplitPreTokens(*split, text, &words);
  else if (!text.empty()) words.push_back({0, text.size()});
  for (const auto& w : words) {
    const size_t first = ids->size();
    bpe.EncodeWord(text.substr(w.begin, w.end - w.begin), ids);
    if (ends == nullptr) continue;
    size_t at = base + w.begin;
    for (size_t k = first; k < ids->size(); ++k) {
      const std::string* bytes = bpe.BytesOf((*ids)[k]);
      at += bytes != nullptr ? bytes->size() : 1;
      ends->push_back(std::min(at, base + w.end));
    }
    if (ids->size() > first) ends->back() = base + w.end;
  }
}

StatusOr<size_t> Tokenizer::Impl::EncodePiece(std::string_view piece, bool split_special, size_t base,
                                              std::vector<TokenId>* ids, std::vector<size_t>* ends) const {
  if (piece.empty()) return size_t{0};
  std::string normalized;
  if (nfc && !IsNfc(piece)) {
    TANDEM_ASSIGN_OR_RETURN(normalized, NormalizeNfc(piece));
    piece = normalized;
  }
  const AddedTokenMatcher& matcher = split_special ? norm_plain : norm_all;
  size_t pos = 0;
  while (pos < piece.size()) {
    const auto m = matcher.Next(piece, pos);
    const size_t stop = m ? m->begin : piece.size();
    EncodeWords(piece.substr(pos, stop - pos), base + pos, ids, ends);
    if (!m) break;
    ids->push_back(m->id);
    if (ends) ends->push_back(base + m->end);
    pos = m->end;
  }
  return piece.size();
}

StatusOr<Tokenizer> Tokenizer::FromJson(std::string_view tokenizer_json, std::string_view config_json) {
  auto impl = std::make_shared<Impl>();
  TANDEM_ASSIGN_OR_RETURN(TokenizerSpec spec, ParseTokenizerJson(tokenizer_json), "tokenizer.json");
  TANDEM_ASSIGN_OR_RETURN(impl->bpe, BpeModel::Build(spec.bpe), "tokenizer.json");
  impl->nfc = spec.nfc;
  impl->split = spec.split;
  impl->vocab_size = impl->bpe.id_end();
  const size_t density_limit = 2 * (spec.bpe.vocab.size() + spec.added_tokens.size()) + 65536;
  std::vector<AddedToken> raw, norm;
  for (size_t i = 0; i < spec.added_tokens.size(); ++i) {
    const AddedToken& t = spec.added_tokens[i];
    if (static_cast<size_t>(t.id) >= density_limit)
      return InvalidArgument("tokenizer.json: added_tokens[" + std::to_string(i) + "].id: " + std::to_string(t.id) +
                             " is far beyond the vocabulary (ids must be below 2 * tokens + 65536)");
    impl->vocab_size = std::max(impl->vocab_size, t.id + 1);
    impl->added_by_id[t.id] = i;
    AddedToken m = t;
    if (t.normalized && spec.nfc) {  // matched in normalized text: normalize its content alike
      TANDEM_ASSIGN_OR_RETURN(m.content, NormalizeNfc(t.content),
                              "tokenizer.json: added_tokens[" + std::to_string(i) + "].content");
    }
    (t.normalized ? norm : raw).push_back(std::move(m));
  }
  impl->added = std::move(spec.added_tokens);
  const auto plain = [](const std::vector<AddedToken>& v) {
    std::vector<AddedToken> out;
    std::copy_if(v.begin(), v.end(), std::back_inserter(out), [](const AddedToken& t) { return !t.special; });
    return out;
  };
  impl->raw_all = AddedTokenMatcher(raw);
  impl->raw_plain = AddedTokenMatcher(plain(raw));
  impl->norm_all = AddedTokenMatcher(norm);
  impl->norm_plain = AddedTokenMatcher(plain(norm));

  if (!config_json.empty()) {
    TANDEM_ASSIGN_OR_RETURN(impl->config, ParseTokenizerConfig(config_json), "tokenizer_config.json");
  }
  Tokenizer tok(impl);
  const auto resolve = [&](const char* key, const std::optional<std::string>& text, std::optional<TokenId>* id,
                           std::optional<std::string>* text_out) -> Status {
    if (!text) return Status::Ok();
    *id = tok.TokenToId(*text);
    if (!*id) return InvalidArgument("tokenizer_config.json: " + std::string(key) + ": \"" + *text +
                                     "\" is not a token of tokenizer.json");
    *text_out = *text;
    return Status::Ok();
  };
  TANDEM_RETURN_IF_ERROR(resolve("eos_token", impl->config.eos_token, &impl->special.eos, &impl->special.eos_text));
  TANDEM_RETURN_IF_ERROR(resolve("pad_token", impl->config.pad_token, &impl->special.pad, &impl->special.pad_text));
  TANDEM_RETURN_IF_ERROR(resolve("bos_token", impl->config.bos_token, &impl->special.bos, &impl->special.bos_text));
  return tok;
}

StatusOr<Tokenizer> Tokenizer::FromFiles(const std::filesystem::path& tokenizer_json,
                                         const std::optional<std::filesystem::path>& config_json) {
  TANDEM_ASSIGN_OR_RETURN(const std::string tj, ReadFile(tokenizer_json));
  std::string cj;
  if (config_json) {
    TANDEM_ASSIGN_OR_RETURN(cj, ReadFile(*config_json));
    if (cj.empty()) return InvalidArgument(config_json->string() + ": empty file");
  }
  auto tok = FromJson(tj, cj);
  if (!tok.ok()) return tok.status().WithContext(tokenizer_json.parent_path().string());
  return tok;
}

StatusOr<Tokenizer> Tokenizer::FromDirectory(const std::filesystem::path& dir) {
  const auto config = dir / "tokenizer_config.json";
  std::error_code ec;
  const bool has_config = std::filesystem::exists(config, ec);
  return FromFiles(dir / "tokenizer.json", has_config ? std::optional(config) : std::nullopt);
}

StatusOr<std::vector<TokenId>> Tokenizer::Encode(std::string_view text, const EncodeOptions& options) const {
  std::vector<TokenId> ids;
  ids.reserve(text.size() / 3 + 4);
  TANDEM_RETURN_IF_ERROR(EncodeAppend(text, options, &ids));
  return ids;
}

Status Tokenizer::EncodeAppend(std::string_view text, const EncodeOptions& options, std::vector<TokenId>* ids,
                               std::vector<size_t>* ends) const {
  const Impl& im = *impl_;
  std::string repaired;
  if (const size_t bad = FindInvalidUtf8(text); bad != std::string_view::npos) {
    if (options.invalid_utf8 == EncodeOptions::InvalidUtf8::kError)
      return InvalidArgument("encode: text is not valid UTF-8 at byte " + std::to_string(bad));
    repaired = ReplaceInvalidUtf8(text);
    text = repaired;
  }
  const AddedTokenMatcher& matcher = options.split_special_tokens ? im.raw_plain : im.raw_all;
  size_t pos = 0, base = 0;
  while (pos <= text.size()) {
    const auto m = matcher.Next(text, pos);
    const size_t stop = m ? m->begin : text.size();
    TANDEM_ASSIGN_OR_RETURN(const size_t len,
                            im.EncodePiece(text.substr(pos, stop - pos), options.split_special_tokens, base, ids, ends),
                            "encode");
    base += len;
    if (!m) break;
    ids->push_back(m->id);
    base += m->end - m->begin;
    if (ends) ends->push_back(base);
    pos = m->end;
  }
  return Status::Ok();
}

std::optional<std::string_view> Tokenizer::TokenBytes(TokenId id) const {
  const Impl& im = *impl_;
  if (const auto it = im.added_by_id.find(id); it != im.added_by_id.end()) return im.added[it->second].content;
  const std::string* bytes = im.bpe.BytesOf(id);
  if (bytes == nullptr) return std::nullopt;
  return std::string_view(*bytes);
}

StatusOr<std::string> Tokenizer::Decode(std::span<const TokenId> ids, const DecodeOptions& options) const {
  const Impl& im = *impl_;
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (options.skip_special_tokens && IsSpecial(ids[i])) continue;
    const auto bytes = TokenBytes(ids[i]);
    if (!bytes)
      return InvalidArgument("decode: ids[" + std::to_string(i) + "] = " + std::to_string(ids[i]) +
                             " is not a token (ids are in [0, " + std::to_string(im.vocab_size) + "))");
    out.append(*bytes);
  }
  if (FindInvalidUtf8(out) != std::string::npos) return ReplaceInvalidUtf8(out);
  return out;
}

std::optional<TokenId> Tokenizer::TokenToId(std::string_view token) const {
  for (const auto& t : impl_->added)
    if (t.content == token) return t.id;
  return impl_->bpe.IdOf(token);
}

bool Tokenizer::IsSpecial(TokenId id) const {
  const auto it = impl_->added_by_id.find(id);
  return it != impl_->added_by_id.end() && impl_->added[it->second].special;
}

bool Tokenizer::normalizes_nfc() const { return impl_->nfc; }
TokenId Tokenizer::vocab_size() const { return impl_->vocab_size; }
const SpecialTokens& Tokenizer::special_tokens() const { return impl_->special; }
const TokenizerConfig& Tokenizer::config() const { return impl_->config; }
const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added; }

}  // namespace tandem::data
