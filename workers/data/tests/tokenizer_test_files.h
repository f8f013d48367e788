// Test helpers for the tokenizer tests: temporary directories and small
// hand-written tokenizer.json documents (docs/model.md "Tokenizer").
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "workers/data/byte_level.h"
#include "workers/data/unicode_text.h"

namespace tandem::data::testing {

// A fresh directory under $TMPDIR, removed by the destructor.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tandem-tok-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed";
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path Write(const std::string& name, const std::string& text) const {
    const auto p = path_ / name;
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }

 private:
  std::filesystem::path path_;
};

// The byte-level character (UTF-8) of byte b.
inline std::string Ch(uint8_t b) {
  std::string s;
  AppendUtf8(ByteToCodePoint(b), &s);
  return s;
}

// A small byte-level BPE tokenizer.json: all 256 bytes (ids 0..255), then
// the merges given as pairs of byte-level strings (ids 256, ...), the Qwen2
// split pattern, NFC, and the added tokens given.
inline nlohmann::ordered_json SmallBpeJson(const std::vector<std::pair<std::string, std::string>>& merges,
                                           const nlohmann::ordered_json& added_tokens = nlohmann::ordered_json::array(),
                                           bool merges_as_strings = false) {
  using Json = nlohmann::ordered_json;
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) vocab[Ch(static_cast<uint8_t>(b))] = b;
  Json m = Json::array();
  int next = 256;
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = next++;
    if (merges_as_strings) m.push_back(a + " " + b);
    else m.push_back(Json::array({a, b}));
  }
  const Json byte_level{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  const Json split{{"type", "Split"},
                   {"pattern",
                    {{"Regex",
                      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                      "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}},
                   {"behavior", "Isolated"},
                   {"invert", false}};
  return Json{{"version", "1.0"},
              {"added_tokens", added_tokens},
              {"normalizer", {{"type", "NFC"}}},
              {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", Json::array({split, byte_level})}}},
              {"post_processor", byte_level},
              {"decoder", byte_level},
              {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"vocab", vocab}, {"merges", m}}}};
}

inline nlohmann::ordered_json Added(int id, const std::string& content, bool special = true) {
  return {{"id", id},         {"content", content}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false},  {"normalized", false}, {"special", special}};
}

// A random engine seeded from the clock; the seed is printed so a failure
// can be replayed with TANDEM_TEST_SEED.
inline std::mt19937& Rng() {
  static std::mt19937 rng = [] {
    unsigned seed = static_cast<unsigned>(std::random_device{}());
    if (const char* s = std::getenv("TANDEM_TEST_SEED")) seed = static_cast<unsigned>(std::strtoul(s, nullptr, 10));
    std::printf("[tokenizer test] seed=%u (TANDEM_TEST_SEED replays)\n", seed);
    return std::mt19937(seed);
  }();
  return rng;
}

// A random valid UTF-8 string of `n` code points drawn from a mix of ASCII,
// whitespace, Latin with accents, combining marks, CJK and emoji.
inline std::string RandomText(size_t n) {
  static const std::vector<char32_t> pool = {
      'a', 'b', 'Z', 'q', '0', '7', ' ', ' ', ' ', '\n', '\t', '\r', '\'', 's', 'L', 'l', '.', ',', '!', '$', '-',
      '_', '(', '{', 0xE9, 0xC5, 0x301, 0x308, 0x327, 0x4E2D, 0x6587, 0x3042, 0x1F600, 0x1F468, 0x200D, 0x1F469,
      0xFE0F, 0x00A0, 0x3000, 0x2028, 0x0661, 0x00B2, 0x0416, 0x05D0, 0x0627, 0x1F1EB, 0x1F1F7, 0x2603};
  std::uniform_int_distribution<size_t> pick(0, pool.size() - 1);
  std::string s;
  for (size_t i = 0; i < n; ++i) AppendUtf8(pool[pick(Rng())], &s);
  return s;
}

// A random valid UTF-8 string of `n` code points: half ASCII, half any code
// point below U+40000 that this ICU knows as assigned (not a surrogate),
// leaving out U+0085, U+FEFF and U+017F, on which JavaScript's regular
// expressions and Oniguruma differ (docs/model.md "Tokenizer").
inline std::string RandomAssignedText(size_t n) {
  std::uniform_int_distribution<uint32_t> any(0, 0x3FFFF), ascii(0x20, 0x7E), coin(0, 1);
  std::string s;
  while (n > 0) {
    const char32_t c = coin(Rng()) ? ascii(Rng()) : any(Rng());
    if ((c >= 0xD800 && c <= 0xDFFF) || c == 0x85 || c == 0xFEFF || c == 0x17F || !IsAssigned(c)) continue;
    AppendUtf8(c, &s);
    --n;
  }
  return s;
}

}  // namespace tandem::data::testing
