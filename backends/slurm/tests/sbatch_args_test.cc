// The spec's Slurm scheduling options as sbatch/srun arguments
// (sbatch_args.h): every option reaches sbatch, GRES defaults to the job's
// device count, typed GRES names reach the steps.
#include "backends/slurm/sbatch_args.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tandem::backends::slurm {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::Not;

TEST(SbatchArgs, EveryOptionReachesSbatch) {
  auto j = nlohmann::json::parse(R"({
    "kind": "slurm", "partition": "gpu", "account": "rl", "qos": "high", "time": "1-02:00:00",
    "nodes": 2, "gpus_per_node": 8, "constraint": "h200", "reservation": "maint",
    "exclusive": true, "nodelist": "gpu[01-02]", "exclude": "gpu07", "sbatch_args": ["--mem=0", "--comment=x"]
  })");
  auto a = SbatchArgs(j, {"job-1", 16, 5, "/runs/job-1/slurm-batch.out"});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_THAT(*a, ElementsAre("--parsable", "--job-name=job-1", "--output=/runs/job-1/slurm-batch.out",
                              "--ntasks=5", "--partition=gpu", "--account=rl", "--qos=high", "--time=1-02:00:00",
                              "--constraint=h200", "--reservation=maint", "--nodelist=gpu[01-02]",
                              "--exclude=gpu07", "--nodes=2", "--gres=gpu:8", "--exclusive", "--mem=0",
                              "--comment=x"));
}

TEST(SbatchArgs, GresDefaultsToTheJobsDevicesAndGresWins) {
  auto plain = SbatchArgs(nlohmann::json::object(), {"j", 4, 2, ""});
  ASSERT_TRUE(plain.ok());
  EXPECT_THAT(*plain, Contains("--gres=gpu:4"));
  EXPECT_THAT(*plain, Contains("--output=/dev/null"));
  auto cpu = SbatchArgs(nlohmann::json::object(), {"j", 0, 1, ""});
  ASSERT_TRUE(cpu.ok());
  for (const auto& s : *cpu) EXPECT_EQ(s.rfind("--gres", 0), std::string::npos) << s;
  auto typed = SbatchArgs(nlohmann::json{{"gres", "gpu:h200:8"}, {"gpus_per_node", 4}}, {"j", 8, 2, ""});
  ASSERT_TRUE(typed.ok());
  EXPECT_THAT(*typed, Contains("--gres=gpu:h200:8"));
  EXPECT_THAT(*typed, Not(Contains("--gres=gpu:4")));
  auto off = SbatchArgs(nlohmann::json{{"exclusive", false}}, {"j", 0, 1, ""});
  ASSERT_TRUE(off.ok());
  EXPECT_THAT(*off, Not(Contains("--exclusive")));
}

TEST(SbatchArgs, WrongTypesAreErrorsNotCrashes) {
  EXPECT_FALSE(SbatchArgs(nlohmann::json{{"partition", 3}}, {"j", 0, 1, ""}).ok());
  EXPECT_FALSE(SbatchArgs(nlohmann::json{{"nodes", "two"}}, {"j", 0, 1, ""}).ok());
  EXPECT_FALSE(SbatchArgs(nlohmann::json::array(), {"j", 0, 1, ""}).ok());
}

TEST(SbatchArgs, StepGresAndSrunArgs) {
  EXPECT_EQ(StepGres(nlohmann::json::object()), "gpu");
  EXPECT_EQ(StepGres(nlohmann::json{{"gres", "gpu:8"}}), "gpu");
  EXPECT_EQ(StepGres(nlohmann::json{{"gres", "gpu:h200:8"}}), "gpu:h200");
  EXPECT_EQ(StepGres(nlohmann::json{{"gres", "gpu:tgpu"}}), "gpu:tgpu");
  EXPECT_THAT(SrunArgs(nlohmann::json{{"srun_args", {"--cpu-bind=none"}}}), ElementsAre("--cpu-bind=none"));
  EXPECT_TRUE(SrunArgs(nlohmann::json::object()).empty());
}

}  // namespace
}  // namespace tandem::backends::slurm
