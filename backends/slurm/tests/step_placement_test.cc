// Multi-node submit mode (step_placement.h): a job's tasks spread over the
// nodes of its batch job, parsed from what `scontrol show job -d` says about
// a multi-node allocation. The test cluster has one node, so the node list
// comes from text here; the one-node path runs for real in submit_test.sh.
#include "backends/slurm/step_placement.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "backends/slurm/hostlist.h"

namespace tandem::backends::slurm {
namespace {

using ::testing::ElementsAre;

// Two nodes with GPUs 0-3, then gpu07 with 4-7 (another job holds 0-3 there).
const char* kThreeNodes = R"(JobId=93 JobName=demo-3f9c
   JobState=RUNNING Reason=None Dependency=(null)
   NodeList=gpu[01-02,07]
   NumNodes=3 NumCPUs=6 NumTasks=6 CPUs/Task=1 ReqB:S:C:T=0:0:*:*
     Nodes=gpu[01-02] CPU_IDs=0-1 Mem=0 GRES=gpu:h200:4(IDX:0-3)
     Nodes=gpu07 CPU_IDs=0-1 Mem=0 GRES=gpu:h200:4(IDX:4-7)
   TresPerNode=gres:gpu:h200:4
)";

Allocation Parse() {
  auto a = ParseScontrolJob(kThreeNodes);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  return *a;
}

TEST(StepPlacement, ParsesEveryNodesGpus) {
  Allocation a = Parse();
  EXPECT_THAT(a.nodes, ElementsAre("gpu01", "gpu02", "gpu07"));
  EXPECT_THAT(a.node_gpus["gpu01"], ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(a.node_gpus["gpu02"], ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(a.node_gpus["gpu07"], ElementsAre(4, 5, 6, 7));
  EXPECT_THAT(a.gpus, ElementsAre(0, 1, 2, 3));
}

TEST(StepPlacement, ReplicasSpreadLikePlaceOnNodes) {
  Allocation a = Parse();
  // 6 replicas of 2 GPUs over 3 nodes of 4: the same nodes PlaceOnNodes picks.
  auto slots = PlaceOnNodes(a.nodes, 4, 6, 2);
  ASSERT_TRUE(slots.ok());
  for (int r = 0; r < 6; ++r) {
    auto p = PlaceStep(a, {2 * r, 2 * r + 1});
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(p->node, (*slots)[static_cast<size_t>(r)].node) << "replica " << r;
  }
  auto last = PlaceStep(a, {10, 11});
  EXPECT_EQ(last->node, "gpu07");
  EXPECT_THAT(last->gpus, ElementsAre(6, 7));  // that node's own GPU ids
  auto second = PlaceStep(a, {4, 5});
  EXPECT_EQ(second->node, "gpu02");
  EXPECT_THAT(second->gpus, ElementsAre(0, 1));
}

TEST(StepPlacement, ColocatedRolesShareTheirNode) {
  Allocation a = Parse();
  auto actor = PlaceStep(a, {8, 9, 10, 11});
  auto rollout = PlaceStep(a, {8, 9, 10, 11});
  ASSERT_TRUE(actor.ok() && rollout.ok());
  EXPECT_EQ(actor->node, rollout->node);
  EXPECT_EQ(actor->gpus, rollout->gpus);
  EXPECT_THAT(actor->gpus, ElementsAre(4, 5, 6, 7));
}

TEST(StepPlacement, NeverSplitsAReplicaNorLeavesTheAllocation) {
  Allocation a = Parse();
  auto split = PlaceStep(a, {3, 4});
  ASSERT_FALSE(split.ok());
  EXPECT_THAT(split.status().ToString(), ::testing::HasSubstr("never split"));
  EXPECT_FALSE(PlaceStep(a, {12}).ok());
  auto cpu = PlaceStep(a, {});
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu->node, "gpu01");
  EXPECT_TRUE(cpu->gpus.empty());
}

TEST(StepPlacement, OneNodeMapsOntoTheAllocationsGpus) {
  auto a = ParseScontrolJob("JobId=7 NodeList=vm\n     Nodes=vm CPU_IDs=0-1 Mem=0 GRES=gpu:tgpu:2(IDX:2-3)\n");
  ASSERT_TRUE(a.ok());
  auto p = PlaceStep(*a, {0, 1});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->node, "vm");
  EXPECT_THAT(p->gpus, ElementsAre(2, 3));
}

}  // namespace
}  // namespace tandem::backends::slurm
