// Tests of the job spec's `handoff` section (handoff_parser.h, job_spec.h
// HandoffSpec): what a user gets for a valid section (fields, defaults,
// KindOf) and the exact errors for each check a schema cannot make.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "orchestrator/spec/job_spec.h"
#include "orchestrator/spec/parse_options.h"

namespace tandem::spec {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;

constexpr uint64_t kGiB = uint64_t{1} << 30;

// Two probe roles sharing one GPU, and a spec with `handoff` = `section`.
std::string Spec(const std::string& section, const std::string& extra_roles = "") {
  return R"({"name": "h", "roles": {
      "actor": {"worker": "probe", "args": ["--tag", "params=1MiB"], "gpus_per_replica": 1},
      "rollout": {"worker": "probe", "gpus_per_replica": 1, "colocate_with": "actor"})" +
         extra_roles + R"(},
    "handoff": )" + section + "}";
}

// The handoff checks of worker kinds this build may not have yet (actor,
// rollout, teacher): parsed as for a build that has every kind.
const ParseOptions kAllKinds{ParseOptions::AllWorkerKinds()};

std::vector<std::string> Errors(const std::string& text) {
  std::vector<std::string> out;
  for (const SpecError& e : ParseJobSpecText(text, kAllKinds).errors) out.push_back(e.ToString());
  return out;
}

HandoffSpec Parsed(const std::string& text) {
  ParseResult r = ParseJobSpecText(text, kAllKinds);
  EXPECT_TRUE(r.spec) << r.ToStatus().message();
  return r.spec ? r.spec->handoff : HandoffSpec{};
}

TEST(HandoffSection, WithoutItEverythingIsTheDefault) {
  ParseResult r = ParseJobSpecText(R"({"name": "n", "roles": {"a": {"command": ["x"], "gpus_per_replica": 1}}})");
  ASSERT_TRUE(r.spec) << r.ToStatus().message();
  const HandoffSpec& h = r.spec->handoff;
  EXPECT_THAT(h.roles, IsEmpty());
  EXPECT_EQ(h.controller, "");
  EXPECT_DOUBLE_EQ(h.timeout_s, 120);
  EXPECT_EQ(h.on_fault, "") << "not given: a fault fails the job, a refusal does not";
  EXPECT_EQ(h.gpu_memory, 0u) << "0: the device's own total";
  EXPECT_THAT(h.phases, IsEmpty()) << "no phase given: every phase keeps its default plan";
  EXPECT_EQ(h.KindOf(r.spec->roles[0]), "") << "a command role takes part only when named";

  HandoffSpec empty = Parsed(Spec("{}"));
  EXPECT_THAT(empty.roles, IsEmpty());
  EXPECT_DOUBLE_EQ(empty.timeout_s, 120);
  EXPECT_EQ(empty.on_fault, "");
}

TEST(HandoffSection, EveryFieldIsFilledIn) {
  HandoffSpec h = Parsed(Spec(R"({
      "roles": {"actor": "actor", "rollout": "rollout"},
      "controller": "actor", "timeout_s": 2.5, "on_fault": "restart", "gpu_memory": "80GiB",
      "phases": {
        "train": {"release": {"rollout": ["weights", "kv_cache", "cuda_graph"]},
                  "resume": {"actor": ["params", "grads"]}, "timeout_s": 300},
        "sync": {"release": {}}}})"));
  EXPECT_THAT(h.roles, ElementsAre(Pair("actor", "actor"), Pair("rollout", "rollout")));
  EXPECT_EQ(h.controller, "actor");
  EXPECT_DOUBLE_EQ(h.timeout_s, 2.5);
  EXPECT_EQ(h.on_fault, "restart");
  EXPECT_EQ(h.gpu_memory, 80 * kGiB);
  ASSERT_EQ(h.phases.size(), 2u) << "only the phases given; the others keep their default plan";
  const HandoffPhaseSpec& train = h.phases.at("train");
  EXPECT_THAT(train.release.at("rollout"), ElementsAre("weights", "kv_cache", "cuda_graph"));
  EXPECT_THAT(train.resume.at("actor"), ElementsAre("params", "grads")) << "tags keep their order";
  EXPECT_DOUBLE_EQ(train.timeout_s, 300);
  const HandoffPhaseSpec& sync = h.phases.at("sync");
  EXPECT_THAT(sync.release, IsEmpty()) << "a phase given replaces its default plan whole";
  EXPECT_THAT(sync.resume, IsEmpty());
  EXPECT_DOUBLE_EQ(sync.timeout_s, 0) << "0: the section's timeout_s";
}

TEST(HandoffSection, GpuMemoryAsIntegerOrSize) {
  EXPECT_EQ(Parsed(Spec(R"({"gpu_memory": 85899345920})")).gpu_memory, 80 * kGiB);
  EXPECT_EQ(Parsed(Spec(R"({"gpu_memory": 2.0})")).gpu_memory, 2u) << "2.0 is an integer in JSON Schema";
  EXPECT_EQ(Parsed(Spec(R"({"gpu_memory": "1.5TiB"})")).gpu_memory, 1536 * kGiB);
  EXPECT_EQ(Parsed(Spec(R"({"gpu_memory": "141GB"})")).gpu_memory, 141000000000u);
  EXPECT_THAT(Errors(Spec(R"({"gpu_memory": "0GiB"})")),
              ElementsAre(R"(handoff.gpu_memory: expected at least 1 byte, got "0GiB")"));
  EXPECT_THAT(Errors(Spec(R"({"gpu_memory": 9007199254740993})")),
              ElementsAre("handoff.gpu_memory: expected an integer <= 9007199254740992, got 9007199254740993"));
  EXPECT_THAT(Errors(Spec(R"({"gpu_memory": "80G"})")),
              ElementsAre(R"(handoff.gpu_memory: expected a size such as "80GiB" or "1.5TiB" (a number and one of the units B, KiB, MiB, GiB, TiB, KB, MB, GB, TB), got "80G")"));
}

TEST(HandoffSection, KindOfTakesTheRolesMapFirstThenTheWorker) {
  ParseResult r = ParseJobSpecText(R"({"name": "k", "roles": {
      "trainer": {"command": ["python3", "train.py"], "gpus_per_replica": 1},
      "gen": {"worker": "rollout", "gpus_per_replica": 1, "colocate_with": "trainer"},
      "ref": {"worker": "probe", "gpus_per_replica": 1, "colocate_with": "trainer"},
      "judge": {"worker": "teacher", "gpus_per_replica": 1, "colocate_with": "trainer"},
      "stats": {"worker": "probe"},
      "log": {"command": ["tail"]}},
    "handoff": {"roles": {"trainer": "actor", "ref": "teacher", "judge": "teacher"}, "controller": "trainer"}})",
                                   kAllKinds);
  ASSERT_TRUE(r.spec) << r.ToStatus().message();
  const JobSpec& s = *r.spec;
  EXPECT_EQ(s.handoff.KindOf(*s.FindRole("trainer")), "actor") << "a command named in roles";
  EXPECT_EQ(s.handoff.KindOf(*s.FindRole("gen")), "rollout") << "a worker's own kind";
  EXPECT_EQ(s.handoff.KindOf(*s.FindRole("ref")), "teacher") << "a probe named in roles";
  EXPECT_EQ(s.handoff.KindOf(*s.FindRole("judge")), "teacher") << "named with its worker's kind";
  EXPECT_EQ(s.handoff.KindOf(*s.FindRole("stats")), "") << "a probe not named is a plain task";
  EXPECT_EQ(s.handoff.KindOf(*s.FindRole("log")), "");
}

TEST(HandoffSection, RolesAndControllerMustNameRolesOfTheJob) {
  EXPECT_THAT(Errors(Spec(R"({"roles": {"actor": "actor", "critic": "teacher"}, "controller": "driver"})")),
              ElementsAre(R"(handoff.roles.critic: expected the name of a role (actor, rollout), got "critic")",
                          R"(handoff.controller: expected the name of a role (actor, rollout), got "driver")"));
}

TEST(HandoffSection, TheControllerMustTakePart) {
  const std::string driver = R"(, "driver": {"command": ["python3", "drive.py"]})";
  EXPECT_THAT(Errors(Spec(R"({"roles": {"actor": "actor"}, "controller": "driver"})", driver)),
              ElementsAre(R"(handoff.controller: expected a role that takes part in the handoff (named in handoff.roles, or with worker "actor", "rollout" or "teacher"), got "driver")"));
  EXPECT_THAT(Errors(Spec(R"({"roles": {"actor": "actor"}, "controller": "rollout"})")),
              ElementsAre(::testing::HasSubstr(R"(got "rollout")")))
      << "a probe worker takes part only when named";
  // A native worker takes part by its kind, without being named.
  EXPECT_THAT(Errors(Spec(R"({"controller": "gen"})", R"(, "gen": {"worker": "rollout", "gpus_per_replica": 1, "colocate_with": "actor"})")),
              IsEmpty());
}

TEST(HandoffSection, AWorkersKindCannotBeContradicted) {
  const std::string gen = R"(, "gen": {"worker": "rollout", "gpus_per_replica": 1, "colocate_with": "actor"})";
  EXPECT_THAT(Errors(Spec(R"({"roles": {"gen": "teacher"}})", gen)),
              ElementsAre(R"(handoff.roles.gen: expected "rollout" (the kind of its worker "rollout"), got "teacher")"));
  EXPECT_THAT(Errors(Spec(R"({"roles": {"gen": "rollout"}})", gen)), IsEmpty()) << "saying it again is fine";
}

TEST(HandoffSection, ARoleTakingPartNeedsGpusInItsGroup) {
  // CPU-only group: named in roles, and by worker kind without any section.
  EXPECT_THAT(Errors(R"({"name": "c", "roles": {"a": {"worker": "probe"}, "b": {"command": ["x"], "colocate_with": "a"}},
                        "handoff": {"roles": {"b": "rollout"}}})"),
              ElementsAre(R"(handoff.roles.b: role "b" takes part in the handoff as "rollout" but its colocation group (owner "a") has no GPUs: a CPU-only group has no GPU memory to hand off)"));
  EXPECT_THAT(Errors(R"({"name": "c", "roles": {"t": {"worker": "teacher"}}})"),
              ElementsAre(R"(roles.t.worker: role "t" takes part in the handoff as "teacher" but its colocation group (owner "t") has no GPUs: a CPU-only group has no GPU memory to hand off)"));
  // A CPU-only role in a group with GPUs, or a CPU-only role not taking part: fine.
  EXPECT_THAT(Errors(Spec(R"({"roles": {"actor": "actor", "helper": "teacher"}})",
                          R"(, "helper": {"command": ["x"], "colocate_with": "actor"}, "plain": {"worker": "probe"})")),
              IsEmpty());
}

TEST(HandoffSection, AtMostOneActorPerColocationGroup) {
  EXPECT_THAT(Errors(Spec(R"({"roles": {"actor": "actor", "rollout": "actor"}})")),
              ElementsAre(R"(handoff.roles.rollout: a second actor-kind role in the colocation group of "actor" ("actor" is its actor): a group has at most one actor)"));
  // Two actors in two groups are two groups' actors.
  EXPECT_THAT(Errors(Spec(R"({"roles": {"actor": "actor"}})",
                          R"(, "other": {"worker": "actor", "replicas": 2, "gpus_per_replica": 1})")),
              IsEmpty());
}

TEST(HandoffSection, APhaseCannotResumeWhatItReleasesForTheSameKind) {
  EXPECT_THAT(
      Errors(Spec(R"({"phases": {"sync": {"release": {"actor": ["grads", "optimizer"]},
                                         "resume": {"actor": ["optimizer"], "rollout": ["grads"]}}}})")),
      ElementsAre(R"(handoff.phases.sync.resume.actor[0]: expected a tag that this phase does not also release for "actor", got "optimizer" (handoff.phases.sync.release.actor releases it))"));
  // In the teacher phase a teacher's release is for the other teachers and
  // its resume for the teacher whose turn it is (the default plan does so).
  EXPECT_THAT(Errors(Spec(R"({"phases": {"teacher": {"release": {"teacher": ["weights", "kv_cache"]},
                                                     "resume": {"teacher": ["weights"]}}}})")),
              IsEmpty());
  EXPECT_THAT(Errors(Spec(R"({"phases": {"teacher": {"release": {"rollout": ["weights"]},
                                                     "resume": {"rollout": ["weights"]}}}})")),
              ElementsAre(::testing::HasSubstr("handoff.phases.teacher.resume.rollout[0]")));
}

TEST(HandoffSection, EverySchemaViolationIsReportedWithItsPath) {
  EXPECT_THAT(
      Errors(Spec(R"({"roles": {"actor": "critic"}, "controler": "actor", "timeout_s": 0, "on_fault": "retry",
                      "gpu_memory": true, "phases": {"eval": {}, "train": {"resume": {"critic": ["params"], "actor": ["params", "params", "state"]},
                                                                          "timeout_s": 86401}}})")),
      ElementsAre(R"(handoff.controler: unknown key; did you mean "controller"?)",
                  R"(handoff.roles.actor: expected one of "actor", "rollout", "teacher", got "critic")",
                  "handoff.timeout_s: expected a number > 0, got 0",
                  R"(handoff.on_fault: expected one of "fail", "restart", got "retry")",
                  R"(handoff.gpu_memory: expected a number of bytes (an integer >= 1) or a size such as "80GiB", got true)",
                  R"(handoff.phases.eval: unknown key; expected one of "rollout", "teacher", "train", "sync")",
                  R"(handoff.phases.train.resume.critic: expected a role kind ("actor", "rollout" or "teacher") as the key)",
                  R"(handoff.phases.train.resume.actor[1]: expected distinct tags, got "params" twice)",
                  R"(handoff.phases.train.resume.actor[2]: expected one of "weights", "kv_cache", "cuda_graph", "params", "grads", "optimizer", "activations", "ipc_exports", got "state")",
                  "handoff.phases.train.timeout_s: expected a number <= 86400, got 86401"));
}

TEST(HandoffSection, RoleChecksWaitForValidRolesAndGroups) {
  // A colocation error does not also produce group errors about the handoff.
  EXPECT_THAT(Errors(R"({"name": "w", "roles": {"a": {"worker": "actor", "colocate_with": "nobody"}}})"),
              ElementsAre(R"(roles.a.colocate_with: expected the name of another role (a), got "nobody")"));
  // An unreadable handoff.roles does not make the controller "not take part".
  EXPECT_THAT(Errors(Spec(R"({"roles": ["actor"], "controller": "actor"})")),
              ElementsAre(R"(handoff.roles: expected an object of role names to kinds ("actor", "rollout", "teacher"), got an array)"));
}

}  // namespace
}  // namespace tandem::spec
