// Tests of colocation group resolution (colocation.h) on roles built by
// hand: chains resolve to their owner, groups come in spec order of owners,
// and every broken reference or misfit is reported with its path.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "orchestrator/spec/colocation.h"

namespace tandem::spec {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

RoleSpec Role(std::string name, int replicas, int gpus, std::string colocate_with = "") {
  RoleSpec r;
  r.name = std::move(name);
  r.command = {"true"};
  r.replicas = replicas;
  r.gpus_per_replica = gpus;
  r.colocate_with = std::move(colocate_with);
  return r;
}

std::vector<std::string> Strings(const std::vector<SpecError>& errors) {
  std::vector<std::string> out;
  for (const auto& e : errors) out.push_back(e.ToString());
  return out;
}

TEST(Colocation, ChainsResolveToTheOwnerAndGroupsFollowSpecOrder) {
  // teacher -> rollout -> actor; critic owns its own group; logger is CPU-only.
  std::vector<RoleSpec> roles = {Role("teacher", 1, 2, "rollout"), Role("actor", 2, 2),
                                 Role("critic", 1, 1), Role("rollout", 1, 4, "actor"),
                                 Role("logger", 1, 0)};
  std::vector<SpecError> errors;
  Colocation col = ResolveColocation(roles, &errors);
  EXPECT_THAT(Strings(errors), IsEmpty());
  ASSERT_EQ(col.groups.size(), 3u);
  EXPECT_EQ(col.groups[0].owner, 1);
  EXPECT_THAT(col.groups[0].members, ElementsAre(1, 0, 3)) << "owner first, then spec order";
  EXPECT_EQ(col.groups[0].devices, 4);
  EXPECT_EQ(col.groups[1].owner, 2);
  EXPECT_EQ(col.groups[2].owner, 4);
  EXPECT_EQ(col.groups[2].devices, 0);
  EXPECT_THAT(col.group_of, ElementsAre(0, 0, 1, 0, 2));
  EXPECT_EQ(col.devices_needed, 5);
}

TEST(Colocation, ACpuOnlyRoleMayJoinAGpuGroup) {
  std::vector<RoleSpec> roles = {Role("actor", 1, 2), Role("reward", 4, 0, "actor")};
  std::vector<SpecError> errors;
  Colocation col = ResolveColocation(roles, &errors);
  EXPECT_THAT(Strings(errors), IsEmpty());
  EXPECT_THAT(col.group_of, ElementsAre(0, 0));
}

struct BadCase {
  const char* what;
  std::vector<RoleSpec> roles;
  std::vector<std::string> errors;
};
void PrintTo(const BadCase& c, std::ostream* os) { *os << c.what; }


class ColocationErrors : public ::testing::TestWithParam<BadCase> {};

TEST_P(ColocationErrors, AreReportedOnceWithTheirPath) {
  std::vector<SpecError> errors;
  ResolveColocation(GetParam().roles, &errors);
  EXPECT_EQ(Strings(errors), GetParam().errors);
}

INSTANTIATE_TEST_SUITE_P(
    Table, ColocationErrors,
    ::testing::Values(
        BadCase{"self", {Role("a", 1, 1, "a")}, {"roles.a.colocate_with: a role cannot colocate with itself"}},
        BadCase{"unknown", {Role("a", 1, 1), Role("b", 1, 1, "zz")},
                {R"(roles.b.colocate_with: expected the name of another role (a, b), got "zz")"}},
        BadCase{"two-cycle reported once at its first role",
                {Role("x", 1, 0), Role("b", 1, 1, "c"), Role("c", 1, 1, "b")},
                {"roles.b.colocate_with: colocation cycle b -> c -> b"}},
        BadCase{"three-cycle entered from a tail",
                {Role("tail", 1, 1, "q"), Role("p", 1, 1, "r"), Role("q", 1, 1, "p"), Role("r", 1, 1, "q")},
                {"roles.p.colocate_with: colocation cycle p -> r -> q -> p"}},
        BadCase{"member larger than the group",
                {Role("a", 1, 2), Role("b", 3, 1, "a")},
                {R"(roles.b: needs 3 devices (3 replicas x 1 gpus_per_replica), more than the 2 of its colocation group (owner "a": 1 replicas x 2 gpus_per_replica))"}},
        BadCase{"chain member larger than the owner's group",
                {Role("a", 1, 2), Role("b", 1, 1, "a"), Role("c", 1, 4, "b")},
                {R"(roles.c: needs 4 devices (1 replicas x 4 gpus_per_replica), more than the 2 of its colocation group (owner "a": 1 replicas x 2 gpus_per_replica))"}},
        BadCase{"gpu role with a cpu owner",
                {Role("cpu", 1, 0), Role("g", 1, 1, "cpu")},
                {R"(roles.g.colocate_with: a role with GPUs (gpus_per_replica 1) cannot colocate with CPU-only role "cpu" (its colocation group has no devices))"}},
        BadCase{"duplicate names (hand-built specs)",
                {Role("a", 1, 0), Role("a", 1, 0)},
                {"roles.a: duplicate role name"}}));

}  // namespace
}  // namespace tandem::spec
