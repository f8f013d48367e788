// The RL summary `tandem run` prints (rl_summary.h) and the curves page of
// `tandem report` (rl_report_page.h): the figures from a metrics.jsonl as
// the actor writes it, and the lines a hostile task could write instead
// (skipped or ignored, never thrown on).
#include "orchestrator/report/rl_summary.h"
#include "orchestrator/report/rl_report_page.h"

#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tandem::report {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class RlSummaryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("rl-summary-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    path_ = (dir_ / "metrics.jsonl").string();
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Write(const std::string& text) { std::ofstream(path_, std::ios::binary) << text; }

  fs::path dir_;
  std::string path_;
};

// Step lines as the actor writes them (docs/rl.md "Metrics").
std::string Step(int step, double reward, double rollout, double train) {
  return "{\"step\":" + std::to_string(step) + ",\"reward/mean\":" + std::to_string(reward) +
         ",\"seconds/rollout\":" + std::to_string(rollout) + ",\"seconds/train\":" + std::to_string(train) +
         ",\"seconds/sync\":0.05,\"seconds/step\":" + std::to_string(rollout + train + 0.1) +
         ",\"tokens/packed\":100,\"tokens/sequence\":300}\n";
}

TEST_F(RlSummaryTest, FiguresOfARun) {
  std::string text = "{\"step\":0,\"eval/accuracy\":0.25,\"eval/problems\":256}\n";
  for (int s = 1; s <= 30; ++s) text += Step(s, s <= 10 ? 0.2 : (s > 20 ? 0.6 : 0.4), 0.5, 1.0);
  text += "{\"step\":15,\"reward/mean\":0.4,\"eval/accuracy\":0.5}\n";  // an eval on a step line counts as a step too
  text += "{\"step\":30,\"eval/accuracy\":0.75,\"eval/problems\":256,\"final\":true}\n";
  Write(text);
  StatusOr<RlSummary> s = ReadRlSummary(path_);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->steps, 31);
  ASSERT_TRUE(s->accuracy_before && s->accuracy_after);
  EXPECT_DOUBLE_EQ(*s->accuracy_before, 0.25);
  EXPECT_DOUBLE_EQ(*s->accuracy_after, 0.75);
  EXPECT_EQ(s->eval_problems, 256);
  EXPECT_EQ(s->reward_window, 10);
  EXPECT_NEAR(s->reward_first, 0.2, 1e-9);
  EXPECT_NEAR(s->reward_last, 0.6 * 9 / 10 + 0.4 / 10, 1e-9);  // the eval line above came last of the steps
  EXPECT_NEAR(s->train_s, (30 * 1.0) / 31, 1e-9);
  EXPECT_EQ(s->tokens_packed, 3000);
  EXPECT_EQ(s->tokens_sequence, 9000);
  EXPECT_EQ(s->skipped, 0u);

  const std::string out = RlSummaryText(*s, "runs/x/metrics.jsonl", nullptr);
  EXPECT_THAT(out, HasSubstr("held-out accuracy  25.0%   75.0%   +50.0 points (greedy, 256 problems)"));
  EXPECT_THAT(out, HasSubstr("sampled reward     0.200   0.580   mean of the first and the last 10 steps"));
  EXPECT_THAT(out, HasSubstr("tree packing       3.0k of 9.0k tokens computed (3.00x fewer)"));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("residency peak")));

  ResidencyModel residency;
  GpuResidency g;
  g.gpu = 1;
  g.peak_bytes = 3 << 20;
  g.peak_phase = "TRAIN";
  g.capacity = 256 << 20;
  residency.gpus.push_back(g);
  EXPECT_THAT(RlSummaryText(*s, "m", &residency), HasSubstr("residency peak     GPU 1 3.0 MiB (TRAIN) of 256.0 MiB"));
}

TEST_F(RlSummaryTest, WithoutAFinalLineTheLastEvalIsAfter) {
  Write("{\"step\":0,\"eval/accuracy\":0.1}\n" + Step(1, 0.1, 1, 1) + "{\"step\":1,\"eval/accuracy\":0.3}\n" +
        Step(2, 0.2, 1, 1));
  StatusOr<RlSummary> s = ReadRlSummary(path_);
  ASSERT_TRUE(s.ok());
  EXPECT_DOUBLE_EQ(*s->accuracy_after, 0.3);
  EXPECT_EQ(s->reward_window, 1);
  EXPECT_FALSE(s->eval_problems);
}

TEST_F(RlSummaryTest, HostileLinesAreSkippedOrIgnored) {
  std::string text = "not json\n[1,2]\n\"s\"\nnull\n{}\n{\"step\":\"1\",\"reward/mean\":1}\n{\"step\":-3}\n";
  text += "{\"step\":1,\"reward/mean\":\"0.5\"}\n";                          // a string reward: not a step
  text += "{\"step\":1,\"reward/mean\":0.5,\"seconds/train\":\"x\",\"tokens/packed\":-5,\"tokens/sequence\":7}\n";
  text += "{\"step\":2,\"reward/mean\":1e308,\"tokens/packed\":9223372036854775807,\"tokens/sequence\":1}\n";
  text += "{\"step\":0,\"eval/accuracy\":[0.9]}\n";
  text += "{\"step\":4,\"eval/accuracy\":0.5,\"final\":\"yes\"}\n";     // a final that is no bool
  text += "{\"step\":5,\"eval/problems\":1e300,\"eval/accuracy\":\"x\"}\n";
  text += std::string(70, '[') + "\n";                                      // deeper than the bound
  text += "{\"step\":3,\"reward/mean\":0.25," + std::string(2 << 20, ' ') + "}\n";  // over 1 MiB
  text += "{\"step\":4,\"reward/mean\":0.75}";                                // no final newline
  Write(text);
  StatusOr<RlSummary> s = ReadRlSummary(path_);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->steps, 3);  // steps 1, 2 and 4
  EXPECT_FALSE(s->accuracy_before);
  EXPECT_DOUBLE_EQ(s->accuracy_after.value_or(-1), 0.5);  // the last eval, not a "final" line
  EXPECT_FALSE(s->eval_problems);
  EXPECT_EQ(s->tokens_packed, 0);
  EXPECT_EQ(s->skipped, 9u);
  const std::string out = RlSummaryText(*s, "m", nullptr);
  EXPECT_THAT(out, HasSubstr("held-out accuracy  -       50.0%"));
  EXPECT_THAT(out, HasSubstr("(9 lines of m skipped: not metrics)"));
}

TEST_F(RlSummaryTest, TheReportPageDrawsASeriesPerMetric) {
  std::string text = "{\"step\":0,\"eval/accuracy\":0.25}\n";
  for (int s = 1; s <= 12; ++s) text += Step(s, 0.1 * s / 2, 0.5, 1.0);
  text += "{\"step\":12,\"eval/accuracy\":0.5,\"final\":true}\n";
  text += "{\"step\":3,\"reward/mean\":0.1,\"grad_norm\":\"<script>\"}\n";
  Write(text);
  StatusOr<RlMetrics> m = ReadRlMetrics(path_);
  ASSERT_TRUE(m.ok());
  const std::string page = RlReportHtml(*m, "runs/<x>");
  EXPECT_THAT(page, HasSubstr("<title>tandem report: runs/&lt;x&gt;</title>"));
  EXPECT_THAT(page, HasSubstr("data-key=\"eval/accuracy\" data-points=\"2\""));
  EXPECT_THAT(page, HasSubstr("data-key=\"reward/mean\" data-points=\"13\""));
  EXPECT_THAT(page, HasSubstr("data-key=\"seconds/train\" data-points=\"12\""));
  EXPECT_THAT(page, HasSubstr("held-out accuracy  25.0%   50.0%"));
  EXPECT_THAT(page, ::testing::Not(HasSubstr("grad_norm")));  // no number, no chart
  EXPECT_THAT(page, ::testing::Not(HasSubstr("<script")));

  Write("not json\n");
  StatusOr<RlMetrics> empty = ReadRlMetrics(path_);
  ASSERT_TRUE(empty.ok());
  EXPECT_THAT(RlReportHtml(*empty, "r"), HasSubstr("no metrics to draw"));
}

TEST_F(RlSummaryTest, AMissingFileIsNotFound) {
  EXPECT_EQ(ReadRlSummary((dir_ / "absent.jsonl").string()).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace tandem::report
