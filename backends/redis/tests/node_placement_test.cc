// Placement onto nodes' own GPUs (node_placement.h; docs/redis.md
// "Placement"): what a user sees is which node a task lands on and which
// physical GPUs it gets there (the agent maps the slots through its --gpus).
#include "backends/redis/node_placement.h"

#include <gtest/gtest.h>

namespace tandem::backends::redis {
namespace {

// The physical ids a node with `gpus` would set for `choice` (what the agent does).
std::vector<int> Physical(const NodeChoice& choice, const std::vector<int>& gpus) {
  std::vector<int> out;
  for (int s : choice.slots) out.push_back(gpus.at(static_cast<size_t>(s)));
  return out;
}

TEST(NodePlacerTest, ColocatedRolesShareGpusReplicasGetDisjointOnesSmallNodesGetNothing) {
  const std::vector<int> big_gpus = {4, 5, 6, 7}, small_gpus = {1};
  std::vector<NodeCapacity> live = {{"big", 4, 0}, {"small", 1, 0}};
  NodePlacer p;
  // actor.0 and rollout.0 share logical 0,1; actor.1 and rollout.1 share 2,3.
  auto a0 = p.Place("j", {0, 1}, live);
  ASSERT_TRUE(a0.ok()) << a0.status().ToString();
  EXPECT_EQ(a0->node, "big") << "the one-GPU node cannot take a two-GPU task";
  p.Hold("j", {0, 1}, *a0);
  live[0].tasks = 1;
  auto r0 = p.Place("j", {0, 1}, live);
  ASSERT_TRUE(r0.ok());
  EXPECT_EQ(r0->node, "big");
  EXPECT_EQ(Physical(*r0, big_gpus), Physical(*a0, big_gpus));
  EXPECT_EQ(Physical(*a0, big_gpus), (std::vector<int>{4, 5}));
  p.Hold("j", {0, 1}, *r0);
  live[0].tasks = 2;
  auto a1 = p.Place("j", {2, 3}, live);
  ASSERT_TRUE(a1.ok());
  EXPECT_EQ(a1->node, "big");
  EXPECT_EQ(Physical(*a1, big_gpus), (std::vector<int>{6, 7})) << "replicas get disjoint GPUs";
  p.Hold("j", {2, 3}, *a1);
  live[0].tasks = 3;
  // A colocated role holding only part of a group's devices lands with it.
  auto part = p.Place("j", {3}, live);
  ASSERT_TRUE(part.ok());
  EXPECT_EQ(part->node, "big");
  EXPECT_EQ(Physical(*part, big_gpus), (std::vector<int>{7}));
  // The big node is full: a one-GPU task goes to the small node ...
  auto one = p.Place("j", {4}, live);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->node, "small");
  EXPECT_EQ(Physical(*one, small_gpus), (std::vector<int>{1}));
  p.Hold("j", {4}, *one);
  // ... and a two-GPU one fits nowhere, saying what each node has free.
  auto none = p.Place("j", {5, 6}, live);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(none.status().message().find("big 0/4, small 0/1"), std::string::npos) << none.status().ToString();
  // Released GPUs are free again, for another job too.
  p.Release("j", {2, 3}, "big");
  auto other = p.Place("k", {0, 1}, live);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_EQ(Physical(*other, big_gpus), (std::vector<int>{6, 7}));
  // A task without devices goes to the node with the fewest tasks.
  auto cpu = p.Place("j", {}, live);
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu->node, "small");
  EXPECT_TRUE(cpu->slots.empty());
}

TEST(NodePlacerTest, NoLiveNodeIsUnavailableAndDeviceListsParse) {
  NodePlacer p;
  EXPECT_EQ(p.Place("j", {0}, {}).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(*ParseDeviceList("0,3,12"), (std::vector<int>{0, 3, 12}));
  EXPECT_TRUE(ParseDeviceList("")->empty());
  EXPECT_FALSE(ParseDeviceList("1,,2").ok());
  EXPECT_FALSE(ParseDeviceList("-1").ok());
}

}  // namespace
}  // namespace tandem::backends::redis
