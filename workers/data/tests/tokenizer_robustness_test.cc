// Hostile input to the tokenizer (docs/model.md "Tokenizer"): truncated and
// garbage tokenizer.json, wrong types, merges naming unknown tokens,
// unsupported parts, ids out of range on decode, invalid UTF-8 text. Every
// case is an error value naming the key path or position; none crashes.
#include <gtest/gtest.h>

#include "workers/data/byte_tokenizer.h"
#include "workers/data/tests/tokenizer_test_files.h"
#include "workers/data/tokenizer.h"

namespace tandem::data {
namespace {

using Json = nlohmann::ordered_json;
using testing::Added;
using testing::Ch;
using testing::SmallBpeJson;

// The error message of loading `j`, or "" when it loads.
std::string LoadError(const Json& j) {
  const auto tok = Tokenizer::FromJson(j.dump());
  return tok.ok() ? "" : tok.status().message();
}

TEST(TokenizerRobustness, TruncatedFilesAreErrors) {
  const auto files = ByteTokenizerFiles();
  ASSERT_TRUE(files.ok());
  const std::string& text = files->tokenizer_json;
  std::uniform_int_distribution<size_t> cut(0, text.size() - 1);
  for (int i = 0; i < 40; ++i) {
    const size_t n = i == 0 ? 0 : cut(testing::Rng());
    const auto tok = Tokenizer::FromJson(std::string_view(text).substr(0, n));
    ASSERT_FALSE(tok.ok()) << "cut at " << n;
    EXPECT_NE(tok.status().message().find("not valid JSON"), std::string::npos) << tok.status().message();
  }
  EXPECT_TRUE(Tokenizer::FromJson(text).ok());
}

TEST(TokenizerRobustness, GarbageAndDeepNestingAreErrors) {
  std::uniform_int_distribution<int> byte(0, 255);
  for (int i = 0; i < 50; ++i) {
    std::string junk(1 + static_cast<size_t>(i) * 7, '\0');
    for (auto& c : junk) c = static_cast<char>(byte(testing::Rng()));
    EXPECT_FALSE(Tokenizer::FromJson(junk).ok());
  }
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const auto tok = Tokenizer::FromJson(deep);
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.status().message().find("nested deeper"), std::string::npos) << tok.status().message();
  EXPECT_NE(LoadError(Json::array()).find("expected an object"), std::string::npos);
}

TEST(TokenizerRobustness, WrongTypesNameTheKeyPath) {
  Json j = SmallBpeJson({});
  j["model"]["vocab"] = Json::array();
  EXPECT_NE(LoadError(j).find("model.vocab: expected an object"), std::string::npos) << LoadError(j);
  j = SmallBpeJson({});
  j["model"]["vocab"]["a"] = "1";
  EXPECT_NE(LoadError(j).find("model.vocab[\"a\"]: expected an integer id, got string"), std::string::npos)
      << LoadError(j);
  j = SmallBpeJson({{Ch('a'), Ch('b')}});
  j["model"]["merges"][0] = 7;
  EXPECT_NE(LoadError(j).find("model.merges[0]: expected a string \"a b\" or a pair"), std::string::npos)
      << LoadError(j);
  j = SmallBpeJson({{Ch('a'), Ch('b')}});
  j["model"]["merges"][0] = "ab";
  EXPECT_NE(LoadError(j).find("model.merges[0]: expected \"a b\""), std::string::npos) << LoadError(j);
  j = SmallBpeJson({}, Json::array({Added(300, "<x>")}));
  j["added_tokens"][0]["special"] = "yes";
  EXPECT_NE(LoadError(j).find("added_tokens[0].special: expected a boolean"), std::string::npos) << LoadError(j);
  j = SmallBpeJson({}, Json::array({Added(300, "<x>"), Added(300, "<y>")}));
  EXPECT_NE(LoadError(j).find("added_tokens[1].id"), std::string::npos) << LoadError(j);
  j = SmallBpeJson({});
  j["model"]["vocab"]["zz"] = 5;  // id 5 is byte 0x05's
  EXPECT_NE(LoadError(j).find("id 5 given to both"), std::string::npos) << LoadError(j);
  j = SmallBpeJson({});
  j["model"]["vocab"]["big"] = 10000000;
  EXPECT_NE(LoadError(j).find("largest id 10000000"), std::string::npos) << LoadError(j);
  j = SmallBpeJson({});
  j["model"]["vocab"]["neg"] = -1;
  EXPECT_NE(LoadError(j).find("outside [0,"), std::string::npos) << LoadError(j);
}

TEST(TokenizerRobustness, MergesNamingUnknownTokensAreErrors) {
  Json j = SmallBpeJson({});
  j["model"]["merges"] = Json::array({Json::array({"nope", Ch('a')})});
  EXPECT_NE(LoadError(j).find("model.merges[0] ('nope', 'a'): 'nope' is not in model.vocab"), std::string::npos)
      << LoadError(j);
  j["model"]["merges"] = Json::array({Ch('a') + " " + Ch('b')});  // "ab" is not a token
  EXPECT_NE(LoadError(j).find("the merged token 'ab' is not in model.vocab"), std::string::npos) << LoadError(j);
}

TEST(TokenizerRobustness, UnsupportedPartsAreRefusedWithWhatIsSupported) {
  Json j = SmallBpeJson({});
  j["model"]["type"] = "Unigram";
  EXPECT_NE(LoadError(j).find("model.type: \"Unigram\" is not supported (supported: \"BPE\")"), std::string::npos);
  j = SmallBpeJson({});
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  EXPECT_NE(LoadError(j).find("pre_tokenizer.type: \"Metaspace\" is not supported (supported: ByteLevel"),
            std::string::npos)
      << LoadError(j);
  j = SmallBpeJson({});
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+";
  EXPECT_NE(LoadError(j).find("pre_tokenizer.pretokenizers[0].pattern.Regex: this pattern is not supported"),
            std::string::npos)
      << LoadError(j);
  j = SmallBpeJson({});
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  EXPECT_NE(LoadError(j).find("behavior: \"Removed\" is not supported"), std::string::npos) << LoadError(j);
  j = SmallBpeJson({});
  j["normalizer"] = {{"type", "NFKC"}};
  EXPECT_NE(LoadError(j).find("normalizer.type: \"NFKC\" is not supported"), std::string::npos) << LoadError(j);
  j = SmallBpeJson({});
  j["decoder"] = {{"type", "WordPiece"}};
  EXPECT_NE(LoadError(j).find("decoder.type: \"WordPiece\" is not supported"), std::string::npos) << LoadError(j);
  j = SmallBpeJson({});
  j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true;
  EXPECT_NE(LoadError(j).find("add_prefix_space: true is not supported"), std::string::npos) << LoadError(j);
  j = SmallBpeJson({});
  j["model"]["vocab"].erase(Ch(0x41));  // no token for byte 'A', no unk, no fallback
  EXPECT_NE(LoadError(j).find("no token for byte 0x41"), std::string::npos) << LoadError(j);
  j["model"]["unk_token"] = "<unk>";
  EXPECT_NE(LoadError(j).find("model.unk_token: '<unk>' is not in model.vocab"), std::string::npos) << LoadError(j);
}

TEST(TokenizerRobustness, UnkAndByteFallbackStandForMissingBytes) {
  Json j = SmallBpeJson({});
  j["model"]["vocab"].erase(Ch(0x41));
  j["model"]["vocab"]["<unk>"] = 400;
  j["model"]["unk_token"] = "<unk>";
  j["model"]["fuse_unk"] = true;
  auto tok = Tokenizer::FromJson(j.dump());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  auto ids = tok->Encode("xAAy");  // one pre-token; the two unks fuse
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<TokenId>{'x', 400, 'y'}));
  j["model"].erase("unk_token");
  j["model"]["byte_fallback"] = true;
  j["model"]["vocab"]["<0x41>"] = 401;
  tok = Tokenizer::FromJson(j.dump());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  ids = tok->Encode("xA");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<TokenId>{'x', 401}));
}

TEST(TokenizerRobustness, DecodeRefusesIdsThatAreNotTokens) {
  auto tok = Tokenizer::FromJson(SmallBpeJson({}, Json::array({Added(300, "<x>")})).dump());
  ASSERT_TRUE(tok.ok());
  for (const TokenId bad : {-1, 256, 299, 301, 1 << 30}) {
    const auto text = tok->Decode(std::vector<TokenId>{'a', bad});
    ASSERT_FALSE(text.ok()) << bad;
    EXPECT_NE(text.status().message().find("ids[1] = " + std::to_string(bad) + " is not a token (ids are in [0, 301))"),
              std::string::npos)
        << text.status().message();
  }
  EXPECT_FALSE(tok->TokenBytes(256).has_value());
  // A lone continuation byte decodes to U+FFFD (lossy UTF-8, as Hugging Face).
  const auto lossy = tok->Decode(std::vector<TokenId>{'a', 0x80, 'b'});
  ASSERT_TRUE(lossy.ok());
  EXPECT_EQ(*lossy, "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(*tok->TokenBytes(0x80), "\x80");
}

TEST(TokenizerRobustness, InvalidUtf8TextIsAnErrorOrReplaced) {
  auto tok = Tokenizer::FromJson(SmallBpeJson({}).dump());
  ASSERT_TRUE(tok.ok());
  const auto err = tok->Encode("ok\xC3(bad");
  ASSERT_FALSE(err.ok());
  EXPECT_EQ(err.status().message(), "encode: text is not valid UTF-8 at byte 2");
  EncodeOptions replace;
  replace.invalid_utf8 = EncodeOptions::InvalidUtf8::kReplace;
  const auto ids = tok->Encode("ok\xC3(bad", replace);
  ASSERT_TRUE(ids.ok());
  const auto expected = tok->Encode("ok\xEF\xBF\xBD(bad");
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(*ids, *expected);
}

TEST(TokenizerRobustness, ConfigErrorsNameTheKey) {
  const std::string tj = SmallBpeJson({}, Json::array({Added(300, "<eos>")})).dump();
  auto tok = Tokenizer::FromJson(tj, R"({"eos_token": "<nope>"})");
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.status().message().find("eos_token: \"<nope>\" is not a token"), std::string::npos);
  tok = Tokenizer::FromJson(tj, R"({"eos_token": 3})");
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.status().message().find("tokenizer_config.json: eos_token: expected a string"), std::string::npos)
      << tok.status().message();
  tok = Tokenizer::FromJson(tj, R"({"eos_token": {"content": "<eos>"}, "pad_token": null, "chat_template": 1})");
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.status().message().find("chat_template: expected a string"), std::string::npos);
  tok = Tokenizer::FromJson(tj, R"({"eos_token": {"content": "<eos>"}, "pad_token": null})");
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_EQ(tok->special_tokens().eos, 300);
  EXPECT_FALSE(tok->special_tokens().pad.has_value());
  testing::TempDir dir;
  const auto missing = Tokenizer::FromDirectory(dir.path());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("tokenizer.json"), std::string::npos);
}

}  // namespace
}  // namespace tandem::data
