// The actor's objectives (objectives.h): routes over teachers, the split of
// a step's prompts, and every refusal naming its path.
#include "workers/roles/objectives.h"

#include <gtest/gtest.h>

namespace tandem::roles {
namespace {

using nlohmann::json;

TEST(Objectives, RoutesGiveEachTeacherItsObjectivesWeights) {
  auto o = ParseObjectives(json::parse(R"({
      "add": {"kind": "distill", "teacher": "t_add", "dataset_options": {"level": 1}},
      "mul": {"kind": "distill", "teacher": "t_mul", "route": {"mul": 0.7, "add": 0.3}, "weight": 2},
      "both": {"kind": "distill", "teacher": "t_add", "route": {"add": 0.5, "mul": 0.5, "task": 1}},
      "task": {"kind": "rl", "dataset": "gsm8k", "weight": 1}})"),
                           "--objectives");
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  ASSERT_EQ(o->list.size(), 4u);  // by name: add, both, mul, task
  EXPECT_EQ(o->list[0].name, "add");
  EXPECT_EQ(o->teachers, (std::vector<std::string>{"t_add", "t_mul"}));
  EXPECT_EQ(o->port_files, (std::vector<std::string>{"t_add.port", "t_mul.port"}));
  EXPECT_EQ(o->routes[0], (std::vector<float>{1, 0}));
  EXPECT_EQ(o->routes[1], (std::vector<float>{0.5f, 0.5f}));  // the rl objective adds no teacher
  EXPECT_EQ(o->routes[2], (std::vector<float>{0.3f, 0.7f}));
  EXPECT_EQ(o->routes[3], (std::vector<float>{0, 0}));
  EXPECT_EQ(o->list[3].dataset, "gsm8k");
  EXPECT_EQ(o->list[0].dataset_options, json::parse(R"({"level": 1})"));
}

TEST(Objectives, PromptsAreSplitByWeight) {
  auto o = ParseObjectives(json::parse(R"({"a": {"kind": "rl", "weight": 1}, "b": {"kind": "rl", "weight": 2},
                                          "c": {"kind": "rl", "weight": 1}})"),
                           "--objectives");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(SplitPrompts(*o, 8), (std::vector<int64_t>{2, 4, 2}));
  EXPECT_EQ(SplitPrompts(*o, 3), (std::vector<int64_t>{1, 1, 1}));  // 0.75, 1.5, 0.75: remainders 0.75, 0.5, 0.75
  EXPECT_EQ(SplitPrompts(*o, 1), (std::vector<int64_t>{0, 1, 0}));
  const Objectives single = SingleObjective("gsm8k", nullptr, nullptr);
  EXPECT_EQ(SplitPrompts(single, 5), (std::vector<int64_t>{5}));
  EXPECT_FALSE(single.any_teacher());
}

TEST(Objectives, RefusalsNameThePath) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"([])", "--objectives: expected an object with at least one objective, got []"},
      {R"({})", "--objectives: expected an object with at least one objective, got {}"},
      {R"({"A b": {"kind": "rl"}})", "--objectives: objective name \"A b\": expected [a-z0-9_-]+ (at most 64)"},
      {R"({"a": 1})", "--objectives.a: expected an object, got 1"},
      {R"({"a": {}})", "--objectives.a.kind: required (\"rl\" or \"distill\")"},
      {R"({"a": {"kind": "ppo"}})", "--objectives.a.kind: expected \"rl\" or \"distill\", got \"ppo\""},
      {R"({"a": {"kind": "distill"}})", "--objectives.a.teacher: required for a distill objective (a teacher role)"},
      {R"({"a": {"kind": "distill", "teacher": "../x"}})", "--objectives.a.teacher: expected a role name ([a-z0-9_-]+), got \"../x\""},
      {R"({"a": {"kind": "rl", "teacher": "t"}})", "--objectives.a: an rl objective has no teacher (kind \"distill\" has)"},
      {R"({"a": {"kind": "rl", "weight": 0}})", "--objectives.a.weight: expected a number > 0, got 0"},
      {R"({"a": {"kind": "rl", "dataset": 3}})", "--objectives.a.dataset: expected a data set name, got 3"},
      {R"({"a": {"kind": "rl", "dataset_options": [1]}})", "--objectives.a.dataset_options: expected an object, got [1]"},
      {R"({"a": {"kind": "rl", "route": {"b": 1}}})", "--objectives.a.route.b: no such objective"},
      {R"({"a": {"kind": "rl", "route": {"a": -1}}})", "--objectives.a.route.a: expected a weight >= 0, got -1"},
      {R"({"a": {"kind": "rl", "route": {"a": 0}}})", "--objectives.a.route: every weight is 0"},
      {R"({"a": {"kind": "rl", "route": {}}})", "--objectives.a.route: expected an object {objective: weight}, got {}"},
      {R"({"a": {"kind": "rl", "sets": 1}})", "--objectives.a: unknown key \"sets\""},
      {R"({"a": {"kind": "distill", "teacher": "t"}, "b": {"kind": "distill", "teacher": "t", "teacher_port_file": "x"}})",
       "--objectives.b.teacher_port_file: teacher t is read from t.port by another objective"},
  };
  for (const auto& [spec, expected] : cases) {
    auto o = ParseObjectives(json::parse(spec), "--objectives");
    ASSERT_FALSE(o.ok()) << spec;
    EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(o.status().message().substr(0, expected.size()), expected) << spec;
  }
}

}  // namespace
}  // namespace tandem::roles
