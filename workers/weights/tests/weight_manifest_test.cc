// The weight manifest (weight_manifest.h): round trip, and hostile JSON
// refused with the field's path and what was expected, never a crash.
#include "workers/weights/weight_manifest.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace tandem::weights {
namespace {

using nlohmann::json;

WeightManifest Sample() {
  WeightManifest m;
  m.version = 3;
  m.digest = 0x0123456789abcdefull;
  m.buffers = {{model::DType::kF32, 4096}, {model::DType::kBF16, 512}};
  m.tensors = {{"model.embed_tokens.weight", model::DType::kF32, {8, 64}, 0, 0},
               {"model.norm.weight", model::DType::kF32, {64}, 0, 2048},
               {"lm_head.weight", model::DType::kBF16, {4, 64}, 1, 0}};
  return m;
}

TEST(WeightManifestTest, RoundTripsThroughJson) {
  const WeightManifest m = Sample();
  ASSERT_TRUE(ValidateWeightManifest(m).ok()) << ValidateWeightManifest(m).ToString();
  const std::string text = ToJson(m).dump();
  auto back = ParseWeightManifest(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->version, 3);
  EXPECT_EQ(back->digest, m.digest);
  EXPECT_EQ(ToJson(*back), ToJson(m));
  EXPECT_EQ(ToJson(m)["digest"], "xxh64:0123456789abcdef");
  EXPECT_EQ(back->total_bytes(), 4096u + 512u);
  ASSERT_NE(back->Find("lm_head.weight"), nullptr);
  EXPECT_EQ(back->Find("lm_head.weight")->nbytes(), 4u * 64 * 2);
  EXPECT_EQ(back->Find("absent"), nullptr);
}

struct Hostile {
  const char* what;
  std::function<void(json&)> edit;
  const char* message;  // a substring the error must contain
};

TEST(WeightManifestTest, RefusesHostileManifestsNamingTheField) {
  const std::vector<Hostile> cases = {
      {"not an object", [](json& j) { j = json::array(); }, "manifest: expected an object"},
      {"unknown key", [](json& j) { j["extra"] = 1; }, "unknown key \"extra\""},
      {"format missing", [](json& j) { j.erase("format"); }, "format: missing"},
      {"wrong format", [](json& j) { j["format"] = "tandem.weights/9"; }, "format: expected \"tandem.weights/1\""},
      {"version negative", [](json& j) { j["version"] = -1; }, "version: expected a non-negative integer, got -1"},
      {"version float", [](json& j) { j["version"] = 3.5; }, "version: expected a non-negative integer, got number"},
      {"version string", [](json& j) { j["version"] = "3"; }, "version: expected a non-negative integer, got string"},
      {"version huge", [](json& j) { j["version"] = 18446744073709551615ull; }, "version: 18446744073709551615 is larger"},
      {"digest short", [](json& j) { j["digest"] = "xxh64:12"; }, "digest: expected \"xxh64:\" and 16 hex digits"},
      {"digest other hash", [](json& j) { j["digest"] = "sha256:0123456789abcdef"; }, "digest: expected"},
      {"digest not hex", [](json& j) { j["digest"] = "xxh64:0123456789abcdeg"; }, "is not lowercase hex"},
      {"buffers missing", [](json& j) { j.erase("buffers"); }, "buffers: missing"},
      {"buffers empty", [](json& j) { j["buffers"] = json::array(); }, "buffers: 0 buffers, expected 1 to 64"},
      {"buffers object", [](json& j) { j["buffers"] = json::object(); }, "buffers: expected an array, got object"},
      {"buffer dtype", [](json& j) { j["buffers"][0]["dtype"] = "F8_E4M3"; }, "buffers[0].dtype: unknown dtype \"F8_E4M3\""},
      {"buffer bytes negative", [](json& j) { j["buffers"][1]["bytes"] = -4; }, "buffers[1].bytes: expected a non-negative integer"},
      {"buffer bytes huge", [](json& j) { j["buffers"][1]["bytes"] = 1ull << 60; }, "buffers[1].bytes: 1152921504606846976 is larger"},
      {"buffer key", [](json& j) { j["buffers"][0]["offset"] = 0; }, "buffers[0]: unknown key \"offset\""},
      {"tensors not array", [](json& j) { j["tensors"] = 5; }, "tensors: expected an array, got number"},
      {"tensor not object", [](json& j) { j["tensors"][1] = "x"; }, "tensors[1]: expected an object, got string"},
      {"name missing", [](json& j) { j["tensors"][2].erase("name"); }, "tensors[2].name: missing"},
      {"name number", [](json& j) { j["tensors"][2]["name"] = 7; }, "tensors[2].name: expected a string"},
      {"name empty", [](json& j) { j["tensors"][0]["name"] = ""; }, "tensors[0].name: expected 1 to 1024 bytes"},
      {"name twice", [](json& j) { j["tensors"][1]["name"] = "model.embed_tokens.weight"; }, "tensors[1].name: \"model.embed_tokens.weight\" appears twice"},
      {"shape not array", [](json& j) { j["tensors"][0]["shape"] = 8; }, "tensors[0].shape: expected an array of dims"},
      {"dim negative", [](json& j) { j["tensors"][0]["shape"][1] = -64; }, "tensors[0].shape[1]: expected a non-negative integer"},
      {"too many dims", [](json& j) { j["tensors"][0]["shape"] = json::array({1, 1, 1, 1, 1, 1, 1, 1, 1}); }, "tensors[0].shape: 9 dims"},
      {"shape overflows", [](json& j) { j["tensors"][0]["shape"] = json::array({1ll << 40, 1ll << 40}); }, "tensors[0].shape: [1099511627776, 1099511627776] has a negative dim or more than 2^63 bytes"},
      {"buffer index", [](json& j) { j["tensors"][2]["buffer"] = 2; }, "tensors[2].buffer: 2, expected 0 to 1"},
      {"misaligned offset", [](json& j) { j["tensors"][1]["offset"] = 2050; }, "tensors[1].offset: 2050 is not a multiple of 4"},
      {"past the buffer", [](json& j) { j["tensors"][1]["offset"] = 4092; }, "tensors[1]: \"model.norm.weight\" spans bytes [4092, 4348) of buffer 0, which has 4096"},
      {"offset huge", [](json& j) { j["tensors"][1]["offset"] = 1ull << 62; }, "tensors[1].offset: 4611686018427387904 is larger"},
      {"overlap", [](json& j) { j["tensors"][1]["offset"] = 1024; }, "\"model.norm.weight\" overlaps \"model.embed_tokens.weight\" in buffer 0"},
      {"tensor key", [](json& j) { j["tensors"][0]["stride"] = json::array(); }, "tensors[0]: unknown key \"stride\""},
  };
  for (const Hostile& c : cases) {
    json j = ToJson(Sample());
    c.edit(j);
    auto parsed = ParseWeightManifest(j.dump());
    ASSERT_FALSE(parsed.ok()) << c.what << ": accepted";
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << c.what;
    EXPECT_NE(parsed.status().message().find(c.message), std::string::npos)
        << c.what << ": " << parsed.status().message() << "\n  expected to contain: " << c.message;
  }
}

TEST(WeightManifestTest, RefusesTextThatIsNotAManifest) {
  for (const std::string& text : {std::string(""), std::string("{"), std::string("null"), std::string(100000, '['),
                                 std::string("{\"format\":\"tandem.weights/1\"}\0garbage", 38)}) {
    auto parsed = ParseWeightManifest(text);
    EXPECT_FALSE(parsed.ok()) << text.substr(0, 40);
    EXPECT_NE(parsed.status().message().find("weight manifest"), std::string::npos) << parsed.status().message();
  }
}

// Every truncation and random byte flips of a valid manifest: an error or a
// manifest that validates, never a crash (ASan/UBSan in the Sanitize build).
TEST(WeightManifestTest, SurvivesTruncationsAndByteFlips) {
  const std::string text = ToJson(Sample()).dump();
  for (size_t n = 0; n < text.size(); ++n) EXPECT_FALSE(ParseWeightManifest(text.substr(0, n)).ok()) << n;
  std::mt19937_64 rng(std::random_device{}());
  for (int i = 0; i < 3000; ++i) {
    std::string t = text;
    for (int k = 0; k < 3; ++k) t[rng() % t.size()] = static_cast<char>(rng());
    auto parsed = ParseWeightManifest(t);
    if (parsed.ok()) EXPECT_TRUE(ValidateWeightManifest(*parsed).ok());
  }
}

TEST(WeightManifestTest, EmptyTensorsAndZeroByteBuffersAreValid) {
  WeightManifest m;
  m.buffers = {{model::DType::kF32, 0}};
  m.tensors = {{"a", model::DType::kF32, {0, 4}, 0, 0}, {"b", model::DType::kF32, {4, 0}, 0, 0}};
  EXPECT_TRUE(ValidateWeightManifest(m).ok()) << ValidateWeightManifest(m).ToString();
}

}  // namespace
}  // namespace tandem::weights
