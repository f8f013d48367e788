// Parsing tokenizer.json and tokenizer_config.json (tokenizer_json.h).
#include "workers/data/tokenizer_json.h"

#include <nlohmann/json.hpp>

#include "common/bounded_json.h"

namespace tandem::data {
namespace {

using Json = nlohmann::json;

Status Bad(const std::string& path, const std::string& what) { return InvalidArgument(path + ": " + what); }

Status WrongType(const std::string& path, const char* expected, const Json& got) {
  return Bad(path, std::string("expected ") + expected + ", got " + got.type_name());
}

// obj[key] or nullptr when absent or null.
const Json* Find(const Json& obj, const char* key) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string Join(const std::string& path, const char* key) { return path.empty() ? key : path + "." + key; }

StatusOr<bool> Bool(const Json& obj, const char* key, const std::string& path, bool fallback) {
  const Json* v = Find(obj, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) return WrongType(Join(path, key), "a boolean", *v);
  return v->get<bool>();
}

StatusOr<std::optional<std::string>> OptString(const Json& obj, const char* key, const std::string& path) {
  const Json* v = Find(obj, key);
  if (v == nullptr) return std::optional<std::string>();
  if (!v->is_string()) return WrongType(Join(path, key), "a string", *v);
  return std::optional<std::string>(v->get<std::string>());
}

StatusOr<std::string> Type(const Json& obj, const std::string& path) {
  if (!obj.is_object()) return WrongType(path, "an object", obj);
  const Json* t = Find(obj, "type");
  if (t == nullptr) return Bad(path, "missing \"type\"");
  if (!t->is_string()) return WrongType(path + ".type", "a string", *t);
  return t->get<std::string>();
}

Status ParseModel(const Json& m, BpeSpec* bpe) {
  TANDEM_ASSIGN_OR_RETURN(const std::string type, Type(m, "model"));
  if (type != "BPE") return Bad("model.type", "\"" + type + "\" is not supported (supported: \"BPE\")");
  if (const Json* d = Find(m, "dropout"); d != nullptr && !(d->is_number() && d->get<double>() == 0.0))
    return Bad("model.dropout", "BPE dropout is not supported (expected null)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    TANDEM_ASSIGN_OR_RETURN(const auto s, OptString(m, key, "model"));
    if (s && !s->empty()) return Bad(Join("model", key), "not supported (expected \"\" or null)");
  }
  TANDEM_ASSIGN_OR_RETURN(const bool ignore_merges, Bool(m, "ignore_merges", "model", false));
  if (ignore_merges) return Bad("model.ignore_merges", "true is not supported (expected false)");
  TANDEM_ASSIGN_OR_RETURN(bpe->fuse_unk, Bool(m, "fuse_unk", "model", false));
  TANDEM_ASSIGN_OR_RETURN(bpe->byte_fallback, Bool(m, "byte_fallback", "model", false));
  TANDEM_ASSIGN_OR_RETURN(bpe->unk_token, OptString(m, "unk_token", "model"));

  const Json* vocab = Find(m, "vocab");
  if (vocab == nullptr) return Bad("model.vocab", "missing");
  if (!vocab->is_object()) return WrongType("model.vocab", "an object {token: id}", *vocab);
  bpe->vocab.reserve(vocab->size());
  for (const auto& [token, id] : vocab->items()) {
    if (!id.is_number_integer()) return WrongType("model.vocab[\"" + token + "\"]", "an integer id", id);
    const auto v = id.get<int64_t>();
    if (v < 0 || v >= kMaxTokenId)
      return Bad("model.vocab[\"" + token + "\"]", "id " + std::to_string(v) + " outside [0, " +
                                                      std::to_string(kMaxTokenId) + ")");
    bpe->vocab.emplace_back(token, static_cast<TokenId>(v));
  }

  const Json* merges = Find(m, "merges");
  if (merges == nullptr) return Status::Ok();  // no merges: every token is one byte
  if (!merges->is_array()) return WrongType("model.merges", "an array", *merges);
  bpe->merges.reserve(merges->size());
  for (size_t i = 0; i < merges->size(); ++i) {
    const Json& e = (*merges)[i];
    const std::string path = "model.merges[" + std::to_string(i) + "]";
    if (e.is_string()) {
      const auto& s = e.get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() || s.find(' ', sp + 1) != std::string::npos)
        return Bad(path, "expected \"a b\" (two tokens and one space), got \"" + s + "\"");
      bpe->merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      bpe->merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
    } else {
      return WrongType(path, "a string \"a b\" or a pair [\"a\", \"b\"]", e);
    }
  }
  return Status::Ok();
}

Status ParseAddedTokens(const Json& list, std::vector<AddedToken>* out) {
  if (!list.is_array()) return WrongType("added_tokens", "an array", list);
  for (size_t i = 0; i < list.size(); ++i) {
    const Json& e = list[i];
    const std::string path = "added_tokens[" + std::to_string(i) + "]";
    if (!e.is_object()) return WrongType(path, "an object", e);
    AddedToken t;
    const Json* id = Find(e, "id");
    if (id == nullptr || !id->is_number_integer())
      return id == nullptr ? Bad(path + ".id", "missing") : WrongType(path + ".id", "an integer", *id);
    const auto v = id->get<int64_t>();
    if (v < 0 || v >= kMaxTokenId)
      return Bad(path + ".id", std::to_string(v) + " outside [0, " + std::to_string(kMaxTokenId) + ")");
    t.id = static_cast<TokenId>(v);
    TANDEM_ASSIGN_OR_RETURN(const auto content, OptString(e, "content", path));
    if (!content || content->empty()) return Bad(path + ".content", "missing or empty");
    t.content = *content;
    TANDEM_ASSIGN_OR_RETURN(t.special, Bool(e, "special", path, false));
    TANDEM_ASSIGN_OR_RETURN(t.single_word, Bool(e, "single_word", path, false));
    TANDEM_ASSIGN_OR_RETURN(t.lstrip, Bool(e, "lstrip", path, false));
    TANDEM_ASSIGN_OR_RETURN(t.rstrip, Bool(e, "rstrip", path, false));
    TANDEM_ASSIGN_OR_RETURN(t.normalized, Bool(e, "normalized", path, !t.special));  // Hugging Face's default
    for (const auto& seen : *out) {
      if (seen.id == t.id) return Bad(path + ".id", std::to_string(t.id) + " repeats " + "\"" + seen.content + "\"");
      if (seen.content == t.content) return Bad(path + ".content", "\"" + t.content + "\" appears twice");
    }
    out->push_back(std::move(t));
  }
  return Status::Ok();
}

Status ParseNormalizer(const Json& n, bool* nfc) {
  TANDEM_ASSIGN_OR_RETURN(const std::string type, Type(n, "normalizer"));
  if (type == "NFC") {
    *nfc = true;
    return Status::Ok();
  }
  if (type == "Sequence") {
    const Json* list = Find(n, "normalizers");
    if (list == nullptr || !list->is_array()) return Bad("normalizer.normalizers", "expected an array");
    for (size_t i = 0; i < list->size(); ++i) {
      const std::string path = "normalizer.normalizers[" + std::to_string(i) + "]";
      TANDEM_ASSIGN_OR_RETURN(const std::string t, Type((*list)[i], path));
      if (t != "NFC") return Bad(path + ".type", "\"" + t + "\" is not supported (supported: \"NFC\")");
      *nfc = true;
    }
    return Status::Ok();
  }
  return Bad("normalizer.type", "\"" + type + "\" is not supported (supported: null, \"NFC\", a Sequence of NFC)");
}

constexpr const char* kSupportedPreTokenizers =
    "supported: ByteLevel(add_prefix_space=false), or a Sequence of one Split (behavior \"Isolated\", "
    "invert false, the Qwen2 or GPT-2 pattern) and ByteLevel(add_prefix_space=false, use_regex=false)";

// ByteLevel(add_prefix_space=false); *use_regex gets its use_regex (default true).
Status ParseByteLevel(const Json& p, const std::string& path, bool* use_regex) {
  TANDEM_ASSIGN_OR_RETURN(const bool prefix, Bool(p, "add_prefix_space", path, true));
  if (prefix) return Bad(path + ".add_prefix_space", "true is not supported (expected false)");
  TANDEM_ASSIGN_OR_RETURN(*use_regex, Bool(p, "use_regex", path, true));
  return Status::Ok();
}

Status ParseSplit(const Json& p, const std::string& path, SplitPattern* pattern) {
  const Json* pat = Find(p, "pattern");
  if (pat == nullptr || !pat->is_object()) return Bad(path + ".pattern", "expected {\"Regex\": ...}");
  const Json* regex = Find(*pat, "Regex");
  if (regex == nullptr || !regex->is_string())
    return Bad(path + ".pattern", "expected {\"Regex\": \"...\"} (String patterns are not supported)");
  const auto known = RecognizeSplitPattern(regex->get_ref<const std::string&>());
  if (!known)
    return Bad(path + ".pattern.Regex", "this pattern is not supported (supported: the Qwen2 pattern " +
                                            std::string(SplitPatternRegex(SplitPattern::kQwen2)) +
                                            " and the GPT-2 pattern " +
                                            std::string(SplitPatternRegex(SplitPattern::kGpt2)) + ")");
  TANDEM_ASSIGN_OR_RETURN(const auto behavior, OptString(p, "behavior", path));
  if (behavior.value_or("Isolated") != "Isolated")
    return Bad(path + ".behavior", "\"" + *behavior + "\" is not supported (expected \"Isolated\")");
  TANDEM_ASSIGN_OR_RETURN(const bool invert, Bool(p, "invert", path, false));
  if (invert) return Bad(path + ".invert", "true is not supported (expected false)");
  *pattern = *known;
  return Status::Ok();
}

Status ParsePreTokenizer(const Json& p, std::optional<SplitPattern>* split) {
  TANDEM_ASSIGN_OR_RETURN(const std::string type, Type(p, "pre_tokenizer"));
  bool use_regex = true;
  if (type == "ByteLevel") {
    TANDEM_RETURN_IF_ERROR(ParseByteLevel(p, "pre_tokenizer", &use_regex));
    if (use_regex) *split = SplitPattern::kGpt2;
    return Status::Ok();
  }
  if (type != "Sequence") return Bad("pre_tokenizer.type", "\"" + type + "\" is not supported (" + kSupportedPreTokenizers + ")");
  const Json* list = Find(p, "pretokenizers");
  if (list == nullptr || !list->is_array()) return Bad("pre_tokenizer.pretokenizers", "expected an array");
  const size_t n = list->size();
  if (n < 1 || n > 2)
    return Bad("pre_tokenizer.pretokenizers", std::to_string(n) + " entries (" + kSupportedPreTokenizers + ")");
  if (n == 2) {
    const std::string path = "pre_tokenizer.pretokenizers[0]";
    TANDEM_ASSIGN_OR_RETURN(const std::string t, Type((*list)[0], path));
    if (t != "Split") return Bad(path + ".type", "\"" + t + "\" is not supported here (" + kSupportedPreTokenizers + ")");
    SplitPattern pattern;
    TANDEM_RETURN_IF_ERROR(ParseSplit((*list)[0], path, &pattern));
    *split = pattern;
  }
  const std::string path = "pre_tokenizer.pretokenizers[" + std::to_string(n - 1) + "]";
  TANDEM_ASSIGN_OR_RETURN(const std::string t, Type((*list)[n - 1], path));
  if (t != "ByteLevel") return Bad(path + ".type", "\"" + t + "\" is not supported here (" + kSupportedPreTokenizers + ")");
  TANDEM_RETURN_IF_ERROR(ParseByteLevel((*list)[n - 1], path, &use_regex));
  if (use_regex && n == 2) return Bad(path + ".use_regex", "true after a Split is not supported (expected false)");
  if (use_regex) *split = SplitPattern::kGpt2;
  return Status::Ok();
}

Status ParseAfterModel(const Json& root, const char* key, const char* what) {
  const Json* d = Find(root, key);
  if (d == nullptr) {
    if (std::string_view(key) == "decoder") return Bad(key, "missing (expected {\"type\": \"ByteLevel\"})");
    return Status::Ok();
  }
  TANDEM_ASSIGN_OR_RETURN(const std::string type, Type(*d, key));
  if (type != "ByteLevel") return Bad(std::string(key) + ".type", "\"" + type + "\" is not supported (" + what + ")");
  return Status::Ok();
}

}  // namespace

StatusOr<TokenizerSpec> ParseTokenizerJson(std::string_view text) {
  TANDEM_ASSIGN_OR_RETURN(const Json root, ParseJsonBounded(text));
  if (!root.is_object()) return WrongType("(top level)", "an object", root);
  TokenizerSpec spec;
  const Json* model = Find(root, "model");
  if (model == nullptr) return Bad("model", "missing");
  TANDEM_RETURN_IF_ERROR(ParseModel(*model, &spec.bpe));
  if (const Json* added = Find(root, "added_tokens")) TANDEM_RETURN_IF_ERROR(ParseAddedTokens(*added, &spec.added_tokens));
  if (const Json* n = Find(root, "normalizer")) TANDEM_RETURN_IF_ERROR(ParseNormalizer(*n, &spec.nfc));
  const Json* pre = Find(root, "pre_tokenizer");
  if (pre == nullptr) return Bad("pre_tokenizer", std::string("missing (") + kSupportedPreTokenizers + ")");
  TANDEM_RETURN_IF_ERROR(ParsePreTokenizer(*pre, &spec.split));
  TANDEM_RETURN_IF_ERROR(ParseAfterModel(root, "decoder", "supported: \"ByteLevel\""));
  TANDEM_RETURN_IF_ERROR(ParseAfterModel(root, "post_processor", "supported: null, \"ByteLevel\""));
  return spec;
}

StatusOr<TokenizerConfig> ParseTokenizerConfig(std::string_view text) {
  TANDEM_ASSIGN_OR_RETURN(const Json root, ParseJsonBounded(text));
  if (!root.is_object()) return WrongType("(top level)", "an object", root);
  TokenizerConfig cfg;
  const auto token = [&](const char* key, std::optional<std::string>* out) -> Status {
    const Json* v = Find(root, key);
    if (v == nullptr) return Status::Ok();
    if (v->is_string()) {
      *out = v->get<std::string>();
      return Status::Ok();
    }
    if (v->is_object()) {
      TANDEM_ASSIGN_OR_RETURN(*out, OptString(*v, "content", key));
      if (!*out) return Bad(std::string(key) + ".content", "missing");
      return Status::Ok();
    }
    return WrongType(key, "a string, null or {\"content\": ...}", *v);
  };
  TANDEM_RETURN_IF_ERROR(token("eos_token", &cfg.eos_token));
  TANDEM_RETURN_IF_ERROR(token("pad_token", &cfg.pad_token));
  TANDEM_RETURN_IF_ERROR(token("bos_token", &cfg.bos_token));
  TANDEM_ASSIGN_OR_RETURN(cfg.add_bos_token, Bool(root, "add_bos_token", "", false));
  if (const Json* t = Find(root, "chat_template")) {
    if (t->is_string()) {
      cfg.chat_template = t->get<std::string>();
    } else if (t->is_array()) {
      for (size_t i = 0; i < t->size(); ++i) {
        const Json& e = (*t)[i];
        const std::string path = "chat_template[" + std::to_string(i) + "]";
        if (!e.is_object()) return WrongType(path, "an object {\"name\", \"template\"}", e);
        TANDEM_ASSIGN_OR_RETURN(const auto name, OptString(e, "name", path));
        TANDEM_ASSIGN_OR_RETURN(const auto tmpl, OptString(e, "template", path));
        if (!tmpl) return Bad(path + ".template", "missing");
        if (!cfg.chat_template || name.value_or("") == "default") cfg.chat_template = *tmpl;
      }
    } else {
      return WrongType("chat_template", "a string or a list of {\"name\", \"template\"}", *t);
    }
  }
  return cfg;
}

}  // namespace tandem::data
