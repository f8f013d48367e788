// A finished job's leftover shm weight segments (orchestrator/daemon/
// weight_segments.h): exactly its tasks' version files go, nothing else.
#include "orchestrator/daemon/weight_segments.h"

#include <gtest/gtest.h>

#include <fstream>

#include "orchestrator/store/tests/temp_dir.h"

namespace tandem::daemon {
namespace {

namespace fs = std::filesystem;

TEST(WeightSegments, RemovesExactlyTheJobsVersionFiles) {
  store::testing::TempDir dir;
  Job job;
  job.id = "grpo-b89f27";
  Task actor;
  actor.id = "grpo-b89f27.actor.0";
  job.tasks.push_back(actor);
  EXPECT_EQ(WeightSegmentPrefix(job.id, actor.id), "tandem-grpo_b89f27-grpo_b89f27.actor.0-v");
  const std::vector<std::string> gone = {"tandem-grpo_b89f27-grpo_b89f27.actor.0-v1",
                                         "tandem-grpo_b89f27-grpo_b89f27.actor.0-v12"};
  const std::vector<std::string> kept = {
      "tandem-grpo_b89f27-grpo_b89f27.actor.0-v",      // no version
      "tandem-grpo_b89f27-grpo_b89f27.actor.0-v3.tmp",  // not a version
      "tandem-grpo_b89f27-grpo_b89f27.actor.1-v3",      // not a task of the job
      "tandem-grpo_b89f28-grpo_b89f28.actor.0-v3",      // another job
      "other"};
  for (const auto& n : gone) std::ofstream(dir.path() / n) << "x";
  for (const auto& n : kept) std::ofstream(dir.path() / n) << "x";
  EXPECT_EQ(RemoveJobWeightSegments(job, dir.path()), gone.size());
  for (const auto& n : gone) EXPECT_FALSE(fs::exists(dir.path() / n)) << n;
  for (const auto& n : kept) EXPECT_TRUE(fs::exists(dir.path() / n)) << n;
  EXPECT_EQ(RemoveJobWeightSegments(job, dir.path() / "missing"), 0u);
}

}  // namespace
}  // namespace tandem::daemon
