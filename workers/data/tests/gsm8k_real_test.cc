// The real GSM8K (shared/data/gsm8k, see its README): every train and test
// row loads under the strict policy, and the gsm8k verifier gives reward 1
// to every row's own reference answer. The data folder is
// $TANDEM_SHARED_DATA, else $TANDEM_SOURCE_DIR/../shared/data; when it is
// missing the test fails and says where it looked.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "workers/data/dataset.h"

namespace tandem::data {
namespace {

namespace fs = std::filesystem;

fs::path SharedData() {
  if (const char* d = std::getenv("TANDEM_SHARED_DATA")) return d;
  const char* src = std::getenv("TANDEM_SOURCE_DIR");
  return fs::path(src ? src : ".") / ".." / "shared" / "data";
}

TEST(Gsm8kReal, EveryRowLoadsAndItsReferenceScoresOne) {
  const fs::path dir = SharedData() / "gsm8k";
  ASSERT_TRUE(fs::exists(dir / "train.jsonl") && fs::exists(dir / "test.jsonl"))
      << "GSM8K not found in " << dir << " (set TANDEM_SHARED_DATA to the shared data folder)";
  for (const auto& [split, rows] : {std::pair<const char*, size_t>{"train.jsonl", 7473}, {"test.jsonl", 1319}}) {
    StatusOr<std::unique_ptr<Dataset>> d = OpenDataset("gsm8k", {{"path", (dir / split).string()}});
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    ASSERT_EQ((*d)->size(), rows) << split;
    EXPECT_EQ((*d)->load_report().skipped, 0u);
    size_t rewarded = 0;
    for (size_t i = 0; i < rows; ++i) {
      const Problem p = *(*d)->Get(i);
      ASSERT_TRUE(p.reference_solution.has_value());
      EXPECT_FALSE(p.answer.empty());
      EXPECT_EQ(p.answer.find(','), std::string::npos) << p.id;
      const Verdict v = (*d)->verifier().Verify(*p.reference_solution, p.answer);
      EXPECT_EQ(v.reward, 1.0) << p.id << " truth " << p.answer << " extracted " << v.extracted.value_or("(none)");
      EXPECT_EQ(v.how, "####") << p.id;
      rewarded += v.reward == 1.0;
      // A response with another answer scores 0.
      EXPECT_EQ((*d)->verifier().Verify("#### " + p.answer + "1", p.answer).reward, 0.0) << p.id;
    }
    EXPECT_EQ(rewarded, rows);
  }
}

}  // namespace
}  // namespace tandem::data
