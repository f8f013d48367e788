// Tests of PlaceJob (placement.h) as tables: spec text + inventory ->
// the logical and physical devices of every task, or the reason it fails.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "orchestrator/placement/placement.h"

namespace tandem::placement {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

spec::JobSpec Parse(const std::string& text) {
  spec::ParseResult r = spec::ParseJobSpecText(text);
  EXPECT_TRUE(r.spec.has_value()) << r.ToStatus().message();
  return r.spec.value_or(spec::JobSpec{});
}

// "role/rank: logical -> physical" per task, e.g. "actor/1: 2,3 -> 6,7".
std::vector<std::string> Describe(const JobPlacement& p) {
  std::vector<std::string> out;
  for (const TaskPlacement& t : p.tasks) {
    out.push_back(fmt::format("{}/{} of {} g{}: {} -> {}", t.role, t.rank, t.world_size, t.group,
                              fmt::join(t.logical, ","), fmt::join(t.physical, ",")));
  }
  return out;
}

struct PlaceCase {
  const char* what;
  std::string spec;
  std::vector<int> gpus;
  std::vector<std::string> tasks;
  std::vector<std::vector<std::string>> groups;
};
void PrintTo(const PlaceCase& c, std::ostream* os) { *os << c.what; }


class Places : public ::testing::TestWithParam<PlaceCase> {};

TEST_P(Places, EveryTaskGetsItsSlice) {
  const PlaceCase& c = GetParam();
  spec::JobSpec s = Parse(c.spec);
  StatusOr<JobPlacement> p = PlaceJob(s, spec::Inventory{c.gpus});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(Describe(*p), c.tasks);
  EXPECT_EQ(p->groups, c.groups);
}

std::string Spec(const std::string& devices, const std::string& roles) {
  return fmt::format(R"({{"name": "p", {} "roles": {{{}}}}})", devices, roles);
}

INSTANTIATE_TEST_SUITE_P(
    Table, Places,
    ::testing::Values(
        PlaceCase{"the issue's example: colocated roles see identical devices",
                  Spec(R"("devices": {"count": 4},)",
                       R"("actor": {"command": ["a"], "replicas": 2, "gpus_per_replica": 2},
                          "rollout": {"command": ["r"], "replicas": 1, "gpus_per_replica": 4, "colocate_with": "actor"})"),
                  {10, 11, 12, 13},
                  {"actor/0 of 2 g0: 0,1 -> 10,11", "actor/1 of 2 g0: 2,3 -> 12,13",
                   "rollout/0 of 1 g0: 0,1,2,3 -> 10,11,12,13"},
                  {{"actor", "rollout"}}},
        PlaceCase{"a chain resolves to its owner; smaller members start at the group's first device",
                  Spec("",
                       R"("teacher": {"command": ["t"], "replicas": 2, "gpus_per_replica": 1, "colocate_with": "rollout"},
                          "actor": {"command": ["a"], "replicas": 1, "gpus_per_replica": 4},
                          "rollout": {"command": ["r"], "replicas": 2, "gpus_per_replica": 2, "colocate_with": "actor"})"),
                  {0, 1, 2, 3},
                  {"teacher/0 of 2 g0: 0 -> 0", "teacher/1 of 2 g0: 1 -> 1",
                   "actor/0 of 1 g0: 0,1,2,3 -> 0,1,2,3", "rollout/0 of 2 g0: 0,1 -> 0,1",
                   "rollout/1 of 2 g0: 2,3 -> 2,3"},
                  {{"actor", "teacher", "rollout"}}},
        PlaceCase{"several groups take consecutive disjoint ranges in spec order of owners",
                  Spec(R"("devices": {"count": 8},)",
                       R"("actor": {"command": ["a"], "replicas": 2, "gpus_per_replica": 2},
                          "teacher": {"command": ["t"], "replicas": 1, "gpus_per_replica": 3},
                          "rollout": {"command": ["r"], "replicas": 4, "gpus_per_replica": 1, "colocate_with": "actor"},
                          "judge": {"command": ["j"], "replicas": 1, "gpus_per_replica": 1, "colocate_with": "teacher"})"),
                  {7, 6, 5, 4, 3, 2, 1, 0},
                  {"actor/0 of 2 g0: 0,1 -> 7,6", "actor/1 of 2 g0: 2,3 -> 5,4",
                   "teacher/0 of 1 g1: 4,5,6 -> 3,2,1", "rollout/0 of 4 g0: 0 -> 7",
                   "rollout/1 of 4 g0: 1 -> 6", "rollout/2 of 4 g0: 2 -> 5",
                   "rollout/3 of 4 g0: 3 -> 4", "judge/0 of 1 g1: 4 -> 3"},
                  {{"actor", "rollout"}, {"teacher", "judge"}}},
        PlaceCase{"explicit logical ids are used in the order given",
                  Spec(R"("devices": {"ids": [3, 1, 2]},)",
                       R"("a": {"command": ["a"], "gpus_per_replica": 2}, "b": {"command": ["b"], "gpus_per_replica": 1})"),
                  {100, 101, 102, 103},
                  {"a/0 of 1 g0: 3,1 -> 103,101", "b/0 of 1 g1: 2 -> 102"},
                  {{"a"}, {"b"}}},
        PlaceCase{"CPU-only roles get no devices and take none",
                  Spec("",
                       R"("reward": {"command": ["w"], "replicas": 3},
                          "actor": {"command": ["a"], "gpus_per_replica": 1},
                          "sidecar": {"command": ["s"], "colocate_with": "actor"})"),
                  {5},
                  {"reward/0 of 3 g0:  -> ", "reward/1 of 3 g0:  -> ", "reward/2 of 3 g0:  -> ",
                   "actor/0 of 1 g1: 0 -> 5", "sidecar/0 of 1 g1:  -> "},
                  {{"reward"}, {"actor", "sidecar"}}},
        PlaceCase{"a job smaller than the inventory uses the first devices",
                  Spec(R"("devices": {"count": 2},)", R"("a": {"command": ["a"], "replicas": 2, "gpus_per_replica": 1})"),
                  {4, 5, 6, 7},
                  {"a/0 of 2 g0: 0 -> 4", "a/1 of 2 g0: 1 -> 5"},
                  {{"a"}}}));

TEST(PlaceJob, GroupDevicesAreTheGroupsRanges) {
  spec::JobSpec s = Parse(Spec(R"("devices": {"count": 6},)",
                               R"("a": {"command": ["a"], "gpus_per_replica": 2}, "b": {"command": ["b"], "gpus_per_replica": 3})"));
  StatusOr<JobPlacement> p = PlaceJob(s, spec::Inventory{{0, 1, 2, 3, 4, 5}});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_THAT(p->group_devices, ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3, 4)));
}

struct FailCase {
  const char* what;
  std::vector<int> gpus;
  StatusCode code;
  const char* reason;
};
void PrintTo(const FailCase& c, std::ostream* os) { *os << c.what; }


class Refuses : public ::testing::TestWithParam<FailCase> {};

TEST_P(Refuses, WithTheReason) {
  spec::JobSpec s = Parse(Spec(R"("devices": {"count": 4},)",
                               R"("actor": {"command": ["a"], "replicas": 2, "gpus_per_replica": 2},
                                  "rollout": {"command": ["r"], "gpus_per_replica": 4, "colocate_with": "actor"})"));
  StatusOr<JobPlacement> p = PlaceJob(s, spec::Inventory{GetParam().gpus});
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), GetParam().code);
  EXPECT_THAT(p.status().message(), HasSubstr(GetParam().reason));
}

INSTANTIATE_TEST_SUITE_P(
    Table, Refuses,
    ::testing::Values(
        FailCase{"inventory too small", {0, 1}, StatusCode::kResourceExhausted,
                 R"(place job "p": job "p" needs 4 devices, the inventory has 2 GPUs (physical ids 0,1))"},
        FailCase{"no gpus at all", {}, StatusCode::kResourceExhausted,
                 "the inventory has no GPUs (declare some with tandemd --gpus)"}));

TEST(PlaceJob, RefusesHandBuiltSpecsThatDoNotFit) {
  spec::JobSpec s = Parse(Spec(R"("devices": {"count": 4},)", R"("a": {"command": ["a"], "gpus_per_replica": 4})"));
  s.roles[0].replicas = 2;  // now needs 8 of the job's 4 devices
  StatusOr<JobPlacement> p = PlaceJob(s, spec::Inventory{{0, 1, 2, 3, 4, 5, 6, 7}});
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(p.status().message(), HasSubstr("the roles need 8 devices, the job has 4"));

  s.roles[0].colocate_with = "a";
  p = PlaceJob(s, spec::Inventory{{0, 1, 2, 3}});
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("roles.a.colocate_with: a role cannot colocate with itself"));

  s.roles[0].colocate_with = "";
  s.roles[0].replicas = 0;
  p = PlaceJob(s, spec::Inventory{{0, 1, 2, 3}});
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("has 0 replicas x 4 gpus_per_replica"));
}

}  // namespace
}  // namespace tandem::placement
