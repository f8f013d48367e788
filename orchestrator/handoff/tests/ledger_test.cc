// The residency ledger (ledger.h): capacity refusals that name GPU, roles and
// bytes; leak flags when the device's used memory does not fall.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "orchestrator/handoff/ledger.h"

namespace tandem::handoff {
namespace {

using ::testing::HasSubstr;

const WorkerId kActor{"actor", 0};
const WorkerId kRollout{"rollout", 0};

Ledger TwoGpus() {
  Ledger l;
  l.SetCapacity(0, 100);
  l.SetCapacity(1, 100);
  l.SetWorkerGpus(kActor, {0, 1});
  l.SetWorkerGpus(kRollout, {1});
  return l;
}

TEST(Ledger, AResumeThatFitsIsAccepted) {
  Ledger l = TwoGpus();
  (void)l.Report(kActor, {{Tag::kParams, 40}}, {}, {}, 1);
  EXPECT_TRUE(l.CheckFits({{kRollout, Tag::kWeights, 60}}).ok());
  EXPECT_EQ(l.Resident(1), 40u);
}

TEST(Ledger, AResumeThatDoesNotFitNamesGpuRolesAndBytes) {
  Ledger l = TwoGpus();
  (void)l.Report(kActor, {{Tag::kParams, 40}, {Tag::kOptimizer, 30}}, {}, {}, 1);
  Status st = l.CheckFits({{kRollout, Tag::kWeights, 20}, {kRollout, Tag::kKvCache, 20}});
  ASSERT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(st.message(), HasSubstr("gpu 1: 70 B resident + 40 B resuming > capacity 100 B"));
  EXPECT_THAT(st.message(), HasSubstr("actor/0 optimizer=30 B"));
  EXPECT_THAT(st.message(), HasSubstr("rollout/0 kv_cache=20 B"));
  EXPECT_THAT(st.message(), ::testing::Not(HasSubstr("gpu 0")));
}

TEST(Ledger, AReleaseThatFreesTheDeviceIsNoLeak) {
  Ledger l = TwoGpus();
  (void)l.Report(kRollout, {{Tag::kKvCache, 50}}, {{1, 60, 100}}, {}, 1);
  auto recs = l.Report(kRollout, {}, {{1, 10, 100}}, {Tag::kKvCache}, 2);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].tag, Tag::kKvCache);
  EXPECT_EQ(recs[0].bytes, 0u);
  EXPECT_EQ(recs[0].delta, -50);
  EXPECT_FALSE(recs[0].leak);
}

TEST(Ledger, AReleaseThatDoesNotLowerUsedMemoryIsALeak) {
  Ledger l = TwoGpus();
  (void)l.Report(kRollout, {{Tag::kKvCache, 50}}, {{1, 60, 100}}, {}, 1);
  auto recs = l.Report(kRollout, {}, {{1, 58, 100}}, {Tag::kKvCache}, 2);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_TRUE(recs[0].leak);
  EXPECT_THAT(recs[0].note, HasSubstr("gpu 1: used fell by 2 bytes, the worker released 50"));
}

// The actor's optimizer: its own accounting, no total. Its release is
// checked against its own previous reading, and the GPU keeps the bound
// the rollout's device-wide reading gave it.
TEST(Ledger, AnOwnAccountingWithoutTotalKeepsTheGpusBound) {
  Ledger l;
  l.SetWorkerGpus(kActor, {1});
  l.SetWorkerGpus(kRollout, {1});
  (void)l.Report(kRollout, {{Tag::kWeights, 30}}, {{1, 30, 100, /*device_wide=*/true}}, {}, 1);
  (void)l.Report(kActor, {{Tag::kOptimizer, 60}}, {{1, 60, 0, false}}, {}, 2);
  auto recs = l.Report(kActor, {}, {{1, 0, 0, false}}, {Tag::kOptimizer}, 3);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_FALSE(recs[0].leak);
  ASSERT_TRUE(l.gpus().at(1).reading.has_value());
  EXPECT_EQ(l.gpus().at(1).reading->total, 100u);
  EXPECT_EQ(l.CheckFits({{kRollout, Tag::kKvCache, 80}}).code(), StatusCode::kResourceExhausted)
      << "30 B resident + 80 B > the rollout's reading of 100 B";
}

TEST(Ledger, ADeadWorkerHoldsNothing) {
  Ledger l = TwoGpus();
  (void)l.Report(kActor, {{Tag::kParams, 40}}, {}, {}, 1);
  auto recs = l.Forget(kActor, 2);
  ASSERT_EQ(recs.size(), 1u);
  EXPECT_EQ(recs[0].delta, -40);
  EXPECT_EQ(l.Resident(0), 0u);
  EXPECT_TRUE(l.ResidentTags(kActor).empty());
}

}  // namespace
}  // namespace tandem::handoff
