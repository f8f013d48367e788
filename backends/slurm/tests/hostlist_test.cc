// Hostlist expressions, GPU index lists, multi-node placement and scontrol
// parsing (backends/slurm/hostlist.h, allocation.h): pure, no cluster.
#include <gtest/gtest.h>

#include "backends/slurm/allocation.h"
#include "backends/slurm/hostlist.h"

namespace tandem::backends::slurm {
namespace {

using V = std::vector<std::string>;

TEST(Hostlist, ExpandsRangesAndKeepsPadding) {
  auto h = ExpandHostlist("gpu[01-04,07]");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(*h, (V{"gpu01", "gpu02", "gpu03", "gpu04", "gpu07"}));
  EXPECT_EQ(*ExpandHostlist("n[08-10]"), (V{"n08", "n09", "n10"}));
}

TEST(Hostlist, ListsAndSeveralGroups) {
  EXPECT_EQ(*ExpandHostlist("a1,b[2-3],c"), (V{"a1", "b2", "b3", "c"}));
  EXPECT_EQ(*ExpandHostlist("r[1-2]-n[1,3]"), (V{"r1-n1", "r1-n3", "r2-n1", "r2-n3"}));
  EXPECT_EQ(*ExpandHostlist("vm"), (V{"vm"}));
  EXPECT_TRUE(ExpandHostlist("")->empty());
}

TEST(Hostlist, MalformedIsAnErrorNamingThePart) {
  for (const char* bad : {"gpu[01-04", "gpu01-04]", "gpu[04-01]", "gpu[a-b]", "gpu[]", "a,,b", "x[1,,2]"}) {
    auto h = ExpandHostlist(bad);
    EXPECT_FALSE(h.ok()) << bad;
  }
  EXPECT_NE(ExpandHostlist("gpu[04-01]").status().ToString().find("reversed"), std::string::npos);
}

TEST(IndexList, SlurmGpuIndices) {
  EXPECT_EQ(*ParseIndexList("0-2,5"), (std::vector<int>{0, 1, 2, 5}));
  EXPECT_EQ(*ParseIndexList("IDX:2-3"), (std::vector<int>{2, 3}));
  EXPECT_TRUE(ParseIndexList("")->empty());
}

TEST(PlaceOnNodes, FillsNodesWithDisjointContiguousSlices) {
  auto nodes = *ExpandHostlist("gpu[01-04,07]");
  auto p = PlaceOnNodes(nodes, 8, 9, 4);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->size(), 9u);
  EXPECT_EQ((*p)[0].node, "gpu01");
  EXPECT_EQ((*p)[0].gpus, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ((*p)[1].node, "gpu01");
  EXPECT_EQ((*p)[1].gpus, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ((*p)[2].node, "gpu02");
  EXPECT_EQ((*p)[8].node, "gpu07");
  EXPECT_EQ((*p)[8].gpus, (std::vector<int>{0, 1, 2, 3}));
}

TEST(PlaceOnNodes, RefusesWhatDoesNotFitAndNeverSplitsAReplica) {
  auto nodes = *ExpandHostlist("gpu[01-02]");
  EXPECT_FALSE(PlaceOnNodes(nodes, 8, 5, 4).ok());
  EXPECT_FALSE(PlaceOnNodes(nodes, 8, 1, 16).ok());
  auto p = PlaceOnNodes(nodes, 8, 4, 3);  // 2 per node, 2 GPUs left idle on each
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)[2].node, "gpu02");
  EXPECT_EQ((*p)[2].gpus, (std::vector<int>{0, 1, 2}));
  auto cpu = PlaceOnNodes(nodes, 8, 3, 0);
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ((*cpu)[2].node, "gpu01");
  EXPECT_TRUE((*cpu)[2].gpus.empty());
}

TEST(Allocation, FromScontrolAndEnvironment) {
  const std::string text =
      "JobId=42 JobName=x\n   NodeList=gpu[01-02]\n   JOB_GRES=gpu:tgpu:4\n"
      "     Nodes=gpu01 CPU_IDs=0-3 Mem=0 GRES=gpu:tgpu:2(IDX:2-3)\n";
  auto a = ParseScontrolJob(text);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->job_id, "42");
  EXPECT_EQ(a->nodes, (V{"gpu01", "gpu02"}));
  EXPECT_EQ(a->gpus, (std::vector<int>{2, 3}));

  auto e = AllocationFromEnvironment(
      {{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_NODELIST", "vm"}, {"CUDA_VISIBLE_DEVICES", "1,2"}});
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->gpus, (std::vector<int>{1, 2}));
  EXPECT_EQ(AllocationFromEnvironment({}).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace tandem::backends::slurm
