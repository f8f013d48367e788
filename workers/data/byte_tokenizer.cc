// Writing the byte-level tokenizer's files (byte_tokenizer.h).
#include "workers/data/byte_tokenizer.h"

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "workers/data/byte_level.h"
#include "workers/data/unicode_text.h"

namespace tandem::data {
namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kChatMlJinja =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

Json ByteLevelStep() {
  return Json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
}

Status WriteText(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return ErrnoStatus("open " + path.string());
  out << text;
  out.close();
  if (!out) return ErrnoStatus("write " + path.string());
  return Status::Ok();
}

}  // namespace

StatusOr<TokenizerFiles> ByteTokenizerFiles(const ByteTokenizerOptions& o) {
  const auto& sp = o.special_tokens;
  for (size_t i = 0; i < sp.size(); ++i) {
    const std::string where = "byte tokenizer: special_tokens[" + std::to_string(i) + "]";
    if (sp[i].empty()) return InvalidArgument(where + ": empty");
    if (FindInvalidUtf8(sp[i]) != std::string::npos) return InvalidArgument(where + ": not valid UTF-8");
    if (std::find(sp.begin(), sp.begin() + static_cast<std::ptrdiff_t>(i), sp[i]) != sp.begin() + static_cast<std::ptrdiff_t>(i))
      return InvalidArgument(where + ": \"" + sp[i] + "\" appears twice");
  }
  const auto is_special = [&](const std::string& s) { return std::find(sp.begin(), sp.end(), s) != sp.end(); };
  for (const auto& [key, value] : {std::pair{"eos_token", &o.eos_token}, std::pair{"pad_token", &o.pad_token}})
    if (!value->empty() && !is_special(*value))
      return InvalidArgument(std::string("byte tokenizer: ") + key + " \"" + *value + "\" is not a special token");
  if (o.chatml_template && !(is_special("<|im_start|>") && is_special("<|im_end|>")))
    return InvalidArgument("byte tokenizer: a ChatML chat_template needs <|im_start|> and <|im_end|> as special tokens");

  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    AppendUtf8(ByteToCodePoint(static_cast<uint8_t>(b)), &ch);
    vocab[ch] = b;
  }
  Json added = Json::array();
  Json added_decoder = Json::object();
  for (size_t i = 0; i < sp.size(); ++i) {
    Json t{{"id", 256 + static_cast<int>(i)}, {"content", sp[i]},     {"single_word", false}, {"lstrip", false},
           {"rstrip", false},                 {"normalized", false}, {"special", true}};
    added.push_back(t);
    t.erase("id");
    added_decoder[std::to_string(256 + i)] = t;
  }
  Json model{{"type", "BPE"},
             {"dropout", nullptr},
             {"unk_token", nullptr},
             {"continuing_subword_prefix", ""},
             {"end_of_word_suffix", ""},
             {"fuse_unk", false},
             {"byte_fallback", false},
             {"ignore_merges", false},
             {"vocab", vocab},
             {"merges", Json::array()}};
  Json tok{{"version", "1.0"},         {"truncation", nullptr},       {"padding", nullptr},
           {"added_tokens", added},    {"normalizer", nullptr},       {"pre_tokenizer", ByteLevelStep()},
           {"post_processor", ByteLevelStep()}, {"decoder", ByteLevelStep()}, {"model", model}};
  const auto token_or_null = [](const std::string& s) { return s.empty() ? Json(nullptr) : Json(s); };
  Json cfg{{"tokenizer_class", "PreTrainedTokenizerFast"},
           {"add_bos_token", false},
           {"add_prefix_space", false},
           {"bos_token", nullptr},
           {"eos_token", token_or_null(o.eos_token)},
           {"pad_token", token_or_null(o.pad_token)},
           {"unk_token", nullptr},
           {"clean_up_tokenization_spaces", false},
           {"model_max_length", 1 << 30},
           {"added_tokens_decoder", added_decoder}};
  if (o.chatml_template) cfg["chat_template"] = kChatMlJinja;
  return TokenizerFiles{tok.dump(2), cfg.dump(2)};
}

Status WriteByteTokenizer(const std::filesystem::path& dir, const ByteTokenizerOptions& options) {
  TANDEM_ASSIGN_OR_RETURN(const TokenizerFiles files, ByteTokenizerFiles(options));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return InvalidArgument("create " + dir.string() + ": " + ec.message());
  TANDEM_RETURN_IF_ERROR(WriteText(dir / "tokenizer.json", files.tokenizer_json));
  TANDEM_RETURN_IF_ERROR(WriteText(dir / "tokenizer_config.json", files.tokenizer_config_json));
  return Status::Ok();
}

}  // namespace tandem::data
