// Unit tests of the tokenizer's parts on small hand-made tokenizers:
// split patterns, BPE merge order (scan and heap held to each other), merges
// in both JSON forms, added tokens, NFC, decode (docs/model.md "Tokenizer").
#include <thread>

#include <gtest/gtest.h>

#include "workers/data/bpe.h"
#include "workers/data/pretokenizer.h"
#include "workers/data/tests/tokenizer_test_files.h"
#include "workers/data/tokenizer.h"
#include "workers/data/unicode_text.h"

namespace tandem::data {
namespace {

using testing::Added;
using testing::Ch;
using testing::SmallBpeJson;

std::vector<std::string> Pieces(SplitPattern p, std::string_view text) {
  std::vector<PreToken> out;
  SplitPreTokens(p, text, &out);
  std::vector<std::string> s;
  for (const auto& t : out) s.emplace_back(text.substr(t.begin, t.end - t.begin));
  return s;
}

using V = std::vector<std::string>;

TEST(SplitPattern, Qwen2PiecesFollowTheRegex) {
  const auto q = SplitPattern::kQwen2;
  EXPECT_EQ(Pieces(q, "Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(Pieces(q, "I'M don't WE'LL"), (V{"I", "'M", " don", "'t", " WE", "'LL"}));
  EXPECT_EQ(Pieces(q, "a  b"), (V{"a", " ", " b"}));
  EXPECT_EQ(Pieces(q, "x\n\n  y"), (V{"x", "\n\n", " ", " y"}));
  EXPECT_EQ(Pieces(q, "12345"), (V{"1", "2", "3", "4", "5"}));
  EXPECT_EQ(Pieces(q, "foo...\n\nbar"), (V{"foo", "...\n\n", "bar"}));
  EXPECT_EQ(Pieces(q, " !! a \t"), (V{" !!", " a", " \t"}));
  EXPECT_EQ(Pieces(q, "\tx$5"), (V{"\tx", "$", "5"}));
  EXPECT_EQ(Pieces(q, "caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87"), (V{"caf\xC3\xA9", " \xE4\xB8\xAD\xE6\x96\x87"}));
  EXPECT_EQ(Pieces(q, " \n x"), (V{" \n", " x"}));
  EXPECT_TRUE(Pieces(q, "").empty());
}

TEST(SplitPattern, Gpt2PiecesFollowTheRegex) {
  const auto g = SplitPattern::kGpt2;
  EXPECT_EQ(Pieces(g, "Hello  world 123"), (V{"Hello", " ", " world", " 123"}));
  EXPECT_EQ(Pieces(g, "I'M it's"), (V{"I", "'", "M", " it", "'s"}));
  EXPECT_EQ(Pieces(g, "a\n\nb !?"), (V{"a", "\n", "\n", "b", " !?"}));
}

TEST(SplitPattern, PiecesCoverRandomTextInOrder) {
  for (int round = 0; round < 200; ++round) {
    const std::string text = testing::RandomText(1 + round % 40);
    for (const auto p : {SplitPattern::kQwen2, SplitPattern::kGpt2}) {
      std::vector<PreToken> out;
      SplitPreTokens(p, text, &out);
      size_t at = 0;
      for (const auto& t : out) {
        ASSERT_EQ(t.begin, at);
        ASSERT_GT(t.end, t.begin);
        at = t.end;
      }
      ASSERT_EQ(at, text.size());
    }
  }
}

TEST(SplitPattern, KnownByExactText) {
  EXPECT_EQ(RecognizeSplitPattern(SplitPatternRegex(SplitPattern::kQwen2)), SplitPattern::kQwen2);
  EXPECT_EQ(RecognizeSplitPattern(SplitPatternRegex(SplitPattern::kGpt2)), SplitPattern::kGpt2);
  EXPECT_FALSE(RecognizeSplitPattern("\\s+"));
}

BpeSpec AbcSpec() {
  BpeSpec spec;
  for (int b = 0; b < 256; ++b) spec.vocab.emplace_back(Ch(static_cast<uint8_t>(b)), b);
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"a", "b"}, {"ab", "c"}, {"b", "c"}, {"a", "a"}, {"aa", "a"}, {"c", "c"}, {"cc", "cc"}, {"aa", "aa"}, {"bc", "ab"}};
  TokenId next = 256;
  for (const auto& [a, b] : merges) {
    const std::string ab = a + b;  // (clang 14 cannot capture structured bindings)
    if (std::none_of(spec.vocab.begin(), spec.vocab.end(), [&](const auto& v) { return v.first == ab; }))
      spec.vocab.emplace_back(ab, next++);
    spec.merges.emplace_back(a, b);
  }
  return spec;
}

TEST(Bpe, MergesByRankLeftmostFirst) {
  auto m = BpeModel::Build(AbcSpec());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::vector<TokenId> ids;
  m->EncodeWord("abc", &ids);
  EXPECT_EQ(ids, (std::vector<TokenId>{*m->IdOf("abc")}));
  ids.clear();
  m->EncodeWord("bcab", &ids);  // ab (rank 0) before bc (rank 2); then bc+ab (rank 8)
  EXPECT_EQ(ids, (std::vector<TokenId>{*m->IdOf("bcab")}));
  ids.clear();
  m->EncodeWord("aaa", &ids);  // a+a leftmost, then aa+a
  EXPECT_EQ(ids, (std::vector<TokenId>{*m->IdOf("aaa")}));
  ids.clear();
  m->EncodeWord("x", &ids);
  EXPECT_EQ(ids, (std::vector<TokenId>{'x'}));
}

TEST(Bpe, ScanAndHeapAgreeOnRandomWords) {
  auto m = BpeModel::Build(AbcSpec());
  ASSERT_TRUE(m.ok());
  std::uniform_int_distribution<int> letter(0, 3), len(1, 300);
  for (int round = 0; round < 300; ++round) {
    std::string w;
    const int n = len(testing::Rng());
    for (int i = 0; i < n; ++i) w.push_back("abcx"[letter(testing::Rng())]);
    std::vector<TokenId> scan, heap, cached;
    m->MergeWord(w, false, &scan);
    m->MergeWord(w, true, &heap);
    m->EncodeWord(w, &cached);
    ASSERT_EQ(scan, heap) << w;
    ASSERT_EQ(scan, cached) << w;
  }
}

TEST(Tokenizer, MergesInBothFormsGiveTheSameIds) {
  const std::vector<std::pair<std::string, std::string>> merges = {
      {Ch('h'), Ch('e')}, {Ch('l'), Ch('l')}, {Ch('h') + Ch('e'), Ch('l') + Ch('l')}, {Ch(' '), Ch('w')}};
  auto pairs = Tokenizer::FromJson(SmallBpeJson(merges, nlohmann::ordered_json::array(), false).dump());
  auto strings = Tokenizer::FromJson(SmallBpeJson(merges, nlohmann::ordered_json::array(), true).dump());
  ASSERT_TRUE(pairs.ok()) << pairs.status().ToString();
  ASSERT_TRUE(strings.ok()) << strings.status().ToString();
  const auto a = pairs->Encode("hello world"), b = strings->Encode("hello world");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(*a, (std::vector<TokenId>{*pairs->TokenToId("hell"), 'o', *pairs->TokenToId(Ch(' ') + "w"), 'o', 'r', 'l',
                                      'd'}));
}

TEST(Tokenizer, AddedTokensSplitFirstLongestMatch) {
  nlohmann::ordered_json added = nlohmann::ordered_json::array({Added(300, "<a>"), Added(301, "<a><b>"),
                                                                Added(302, "<think>", /*special=*/false)});
  auto tok = Tokenizer::FromJson(SmallBpeJson({}, added).dump());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  auto ids = tok->Encode("x<a><b>y<a>z<think>");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<TokenId>{'x', 301, 'y', 300, 'z', 302}));
  EncodeOptions as_text;
  as_text.split_special_tokens = true;  // special ones become text; <think> (not special) stays a token
  ids = tok->Encode("<a>z<think>", as_text);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<TokenId>{'<', 'a', '>', 'z', 302}));
  auto text = tok->Decode(std::vector<TokenId>{'x', 301, 302});
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "x<a><b><think>");
  DecodeOptions skip;
  skip.skip_special_tokens = true;
  text = tok->Decode(std::vector<TokenId>{'x', 301, 302}, skip);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "x<think>");
  EXPECT_EQ(tok->vocab_size(), 303);
}

TEST(Tokenizer, AddedTokenStripAndSingleWord) {
  auto strip = Added(300, "<m>");
  strip["lstrip"] = true;
  strip["rstrip"] = true;
  auto word = Added(301, "cat");
  word["single_word"] = true;
  auto tok = Tokenizer::FromJson(SmallBpeJson({}, nlohmann::ordered_json::array({strip, word})).dump());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  auto ids = tok->Encode("a  <m> \nb");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<TokenId>{'a', 300, 'b'}));
  ids = tok->Encode("cat concat cat.");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<TokenId>{301, ' ', 'c', 'o', 'n', 'c', 'a', 't', ' ', 301, '.'}));
}

TEST(Tokenizer, NfcNormalizesBeforeEncoding) {
  auto tok = Tokenizer::FromJson(SmallBpeJson({}).dump());
  ASSERT_TRUE(tok.ok());
  EXPECT_TRUE(tok->normalizes_nfc());
  const auto composed = tok->Encode("caf\xC3\xA9"), decomposed = tok->Encode("cafe\xCC\x81");
  ASSERT_TRUE(composed.ok() && decomposed.ok());
  EXPECT_EQ(*composed, *decomposed);
  EXPECT_EQ(*composed, (std::vector<TokenId>{'c', 'a', 'f', 0xC3, 0xA9}));
}

TEST(Tokenizer, EndsAreByteOffsets) {
  const std::vector<std::pair<std::string, std::string>> merges = {{Ch('a'), Ch('b')}};
  auto tok = Tokenizer::FromJson(SmallBpeJson(merges, nlohmann::ordered_json::array({Added(300, "<s>")})).dump());
  ASSERT_TRUE(tok.ok());
  std::vector<TokenId> ids;
  std::vector<size_t> ends;
  ASSERT_TRUE(tok->EncodeAppend("ab c<s>ab", {}, &ids, &ends).ok());
  EXPECT_EQ(ids.size(), ends.size());
  EXPECT_EQ(ends, (std::vector<size_t>{2, 3, 4, 7, 9}));
}

TEST(Tokenizer, RoundTripsRandomText) {
  const std::vector<std::pair<std::string, std::string>> merges = {{Ch(' '), Ch('a')}, {Ch('a'), Ch('b')}};
  auto tok = Tokenizer::FromJson(SmallBpeJson(merges).dump());
  ASSERT_TRUE(tok.ok());
  for (int round = 0; round < 200; ++round) {
    const std::string text = testing::RandomText(1 + round % 60);
    const auto nfc = NormalizeNfc(text);
    ASSERT_TRUE(nfc.ok());
    const auto ids = tok->Encode(text);
    ASSERT_TRUE(ids.ok());
    const auto back = tok->Decode(*ids);
    ASSERT_TRUE(back.ok());
    ASSERT_EQ(*back, *nfc);
  }
}

TEST(Tokenizer, SharedAcrossThreadsGivesTheSameIds) {
  const std::vector<std::pair<std::string, std::string>> merges = {
      {Ch(' '), Ch('a')}, {Ch('a'), Ch('b')}, {Ch('b'), Ch('c')}, {Ch(' ') + Ch('a'), Ch('b')}};
  auto tok = Tokenizer::FromJson(SmallBpeJson(merges).dump());
  ASSERT_TRUE(tok.ok());
  std::vector<std::string> texts;
  for (int i = 0; i < 64; ++i) texts.push_back(testing::RandomText(20) + " ab abc bc " + std::to_string(i));
  std::vector<std::vector<TokenId>> expected;
  {
    auto fresh = Tokenizer::FromJson(SmallBpeJson(merges).dump());  // its own cache
    ASSERT_TRUE(fresh.ok());
    for (const auto& t : texts) expected.push_back(*fresh->Encode(t));
  }
  std::vector<int> wrong(4, 0);
  std::vector<std::thread> threads;
  for (size_t k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      const Tokenizer copy = *tok;  // copies share tables and cache
      for (int round = 0; round < 20; ++round)
        for (size_t i = 0; i < texts.size(); ++i)
          if (*copy.Encode(texts[(i + k * 7) % texts.size()]) != expected[(i + k * 7) % texts.size()]) ++wrong[k];
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong, (std::vector<int>{0, 0, 0, 0}));
}

TEST(Unicode, ReplacesMaximalSubparts) {
  EXPECT_EQ(FindInvalidUtf8("ok \xC3\xA9"), std::string::npos);
  EXPECT_EQ(FindInvalidUtf8("ab\xC3"), 2u);
  EXPECT_EQ(FindInvalidUtf8("\xED\xA0\x80"), 0u);  // a surrogate
  EXPECT_EQ(FindInvalidUtf8("\xC0\xAF"), 0u);      // overlong
  EXPECT_EQ(ReplaceInvalidUtf8("a\xE2\x82z"), "a\xEF\xBF\xBDz");                  // truncated 3-byte: one U+FFFD
  EXPECT_EQ(ReplaceInvalidUtf8("\xFF\xFE"), "\xEF\xBF\xBD\xEF\xBF\xBD");          // two bad bytes: two
  std::string four;
  for (int i = 0; i < 4; ++i) four += "\xEF\xBF\xBD";
  EXPECT_EQ(ReplaceInvalidUtf8("\xF4\x90\x80\x80"), four);  // above U+10FFFF: lead and 3 strays
}

TEST(Unicode, ClassesFollowOniguruma) {
  EXPECT_TRUE(IsWhitespace(0x85));     // NEL is White_Space
  EXPECT_FALSE(IsWhitespace(0xFEFF));  // BOM is not
  EXPECT_TRUE(IsWhitespace(0x3000));
  EXPECT_TRUE(IsLetter(0x4E2D));
  EXPECT_FALSE(IsLetter(0x301));  // a combining mark is M, not L
  EXPECT_TRUE(IsNumber(0xB2));    // superscript two is No
  EXPECT_TRUE(IsNumber(0x661));   // Arabic-Indic one is Nd
}

}  // namespace
}  // namespace tandem::data
