// tandem-generate on the CPU (the GPU checks and benchmarks drive it:
// scripts/gpu/engine_check.py, engine_bench.py): a tiny random model saved
// as a Hugging Face directory, prompts in a file, and the outputs' shape,
// greedy samples against each other, sampled runs against a second run of
// the same seeds, and bad flags refused with the flag named.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_process.h"
#include "workers/inference/tests/engine_test_util.h"
#include "workers/model/checkpoint.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class GenerateCli : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = testing::MakeTempDir("generate_cli");
    ASSERT_FALSE(tmp_.empty());
    ASSERT_TRUE(model::SavePretrained(*inference::testing::TinyModel(7), (tmp_ / "model").string()).ok());
    std::ofstream(tmp_ / "prompts.json") << R"({"prompts": [[1, 2, 3], [4, 5]]})";
  }
  void TearDown() override { fs::remove_all(tmp_); }

  // tandem-generate over the two prompts with `flags`; its OUT.json.
  json Generate(const std::vector<std::string>& flags, const std::string& name) {
    std::vector<std::string> args = {"--model", (tmp_ / "model").string(), "--prompts",
                                     (tmp_ / "prompts.json").string(), "--out", (tmp_ / name).string(),
                                     "--max-new-tokens", "6"};
    args.insert(args.end(), flags.begin(), flags.end());
    const testing::CliRun r = testing::RunBinary(tmp_, "tandem-generate", args);
    EXPECT_EQ(r.rc, 0) << r.err;
    return json::parse(testing::ReadFile(tmp_ / name), nullptr, false);
  }

  fs::path tmp_;
};

// Prompt-major outputs of --n samples each, NEW tokens a sample, every id
// in the vocabulary; --repeat runs reported.
void ExpectShape(const json& out, size_t samples, int runs) {
  ASSERT_TRUE(out.is_object()) << out.dump();
  ASSERT_EQ(out["outputs"].size(), samples);
  for (const json& o : out["outputs"]) {
    ASSERT_EQ(o.size(), 6u);
    for (const json& id : o) EXPECT_TRUE(id.get<int>() >= 0 && id.get<int>() < 61) << id;
  }
  EXPECT_EQ(out["runs"].size(), static_cast<size_t>(runs));
}

TEST_F(GenerateCli, GreedySamplesOfAPromptAreItsGreedyOutput) {
  const json one = Generate({}, "one.json");
  ASSERT_NO_FATAL_FAILURE(ExpectShape(one, 2, 1));
  const json three = Generate({"--n", "3"}, "three.json");
  ASSERT_NO_FATAL_FAILURE(ExpectShape(three, 6, 1));
  for (int p = 0; p < 2; ++p)
    for (int s = 0; s < 3; ++s) EXPECT_EQ(three["outputs"][3 * p + s], one["outputs"][p]) << p << " " << s;
}

TEST_F(GenerateCli, SampledRunsDrawAlikeAndSamplesDiffer) {
  const json a = Generate({"--n", "3", "--temperature", "5", "--repeat", "2"}, "a.json");
  ASSERT_NO_FATAL_FAILURE(ExpectShape(a, 6, 2));
  const json b = Generate({"--n", "3", "--temperature", "5"}, "b.json");
  ASSERT_NO_FATAL_FAILURE(ExpectShape(b, 6, 1));
  EXPECT_EQ(a["outputs"], b["outputs"]);  // prompt i seeded i, in both processes
  // Near-uniform draws over 61 ids: the three samples of a prompt differ.
  for (int p = 0; p < 2; ++p) {
    std::set<std::string> distinct;
    for (int s = 0; s < 3; ++s) distinct.insert(a["outputs"][3 * p + s].dump());
    EXPECT_EQ(distinct.size(), 3u) << a["outputs"].dump();
  }
}

TEST_F(GenerateCli, RefusesBadFlags) {
  const std::vector<std::string> base = {"--model", (tmp_ / "model").string(), "--prompts",
                                         (tmp_ / "prompts.json").string(), "--out", (tmp_ / "x.json").string()};
  const struct {
    std::vector<std::string> flags;
    const char* says;
  } bad[] = {
      {{"--temperature", "-1"}, "--temperature: expected a number in [0, 100]"},
      {{"--temperature", "nan"}, "--temperature: expected a number in [0, 100]"},
      {{"--n", "0"}, "--n: expected a positive integer"},
      {{"--n", "5000"}, "--n: at most 4096"},
  };
  for (const auto& b : bad) {
    std::vector<std::string> args = base;
    args.insert(args.end(), b.flags.begin(), b.flags.end());
    const testing::CliRun r = testing::RunBinary(tmp_, "tandem-generate", args);
    EXPECT_EQ(r.rc, 2) << b.says;
    EXPECT_NE(r.err.find(b.says), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace tandem
