// Tests of the job spec parser (job_spec.h): what a user sees for valid
// specs (fields, defaults, order) and for invalid ones (every violation,
// with its path and what was expected).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "orchestrator/spec/job_spec.h"
#include "orchestrator/spec/parse_options.h"

namespace tandem::spec {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kIssueExample = R"({
  "name": "demo",
  "backend": {"kind": "local"},
  "devices": {"count": 4},
  "env": {"OMP_NUM_THREADS": "1"},
  "run_dir": "runs/demo",
  "roles": {
    "actor":   {"command": ["bash", "-c", "..."], "replicas": 2, "gpus_per_replica": 2,
                "env": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
                "replica_env": [{"X": "0"}, {"X": "1"}], "ports": 2,
                "restart": {"policy": "on-failure", "max_restarts": 2}},
    "rollout": {"command": ["..."], "replicas": 1, "gpus_per_replica": 4,
                "colocate_with": "actor",
                "env": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"}}
  }
})";

std::vector<std::string> Errors(std::string_view text) {
  std::vector<std::string> out;
  for (const SpecError& e : ParseJobSpecText(text).errors) out.push_back(e.ToString());
  return out;
}

std::string Joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& e : v) s += e + "\n";
  return s;
}

TEST(JobSpecParser, IssueExampleParsesWithEveryField) {
  ParseResult r = ParseJobSpecText(kIssueExample);
  ASSERT_TRUE(r.errors.empty()) << r.ToStatus().message();
  ASSERT_TRUE(r.spec.has_value());
  const JobSpec& s = *r.spec;
  EXPECT_EQ(s.name, "demo");
  EXPECT_EQ(s.backend.kind, BackendKind::kLocal);
  EXPECT_EQ(BackendKindName(s.backend.kind), "local");
  EXPECT_THAT(s.devices, ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(s.env.at("OMP_NUM_THREADS"), "1");
  EXPECT_EQ(s.run_dir, "runs/demo");
  ASSERT_EQ(s.roles.size(), 2u);
  const RoleSpec& actor = s.roles[0];
  EXPECT_EQ(actor.name, "actor");
  EXPECT_THAT(actor.command, ElementsAre("bash", "-c", "..."));
  EXPECT_EQ(actor.worker, "");
  EXPECT_EQ(actor.replicas, 2);
  EXPECT_EQ(actor.gpus_per_replica, 2);
  EXPECT_EQ(actor.env.at("PYTORCH_CUDA_ALLOC_CONF"), "expandable_segments:True");
  ASSERT_EQ(actor.replica_env.size(), 2u);
  EXPECT_EQ(actor.replica_env[1].at("X"), "1");
  EXPECT_EQ(actor.ports, 2);
  EXPECT_EQ(actor.restart.kind, RestartPolicy::Kind::kOnFailure);
  EXPECT_EQ(actor.restart.max_restarts, 2);
  EXPECT_DOUBLE_EQ(actor.restart.backoff_initial_s, 1.0);
  EXPECT_DOUBLE_EQ(actor.restart.backoff_max_s, 30.0);
  const RoleSpec* rollout = s.FindRole("rollout");
  ASSERT_NE(rollout, nullptr);
  EXPECT_EQ(rollout->colocate_with, "actor");
  EXPECT_EQ(rollout->restart.kind, RestartPolicy::Kind::kNever);
  EXPECT_EQ(s.FindRole("teacher"), nullptr);
  EXPECT_EQ(s.raw["roles"].begin().key(), "actor");
  EXPECT_TRUE(r.ToStatus().ok());
}

TEST(JobSpecParser, RolesKeepTheDocumentsOrder) {
  const char* text = R"({"name": "o", "roles": {
      "zeta": {"command": ["true"]}, "alpha": {"command": ["true"]}, "mid": {"command": ["true"]}}})";
  ParseResult r = ParseJobSpecText(text);
  ASSERT_TRUE(r.spec) << r.ToStatus().message();
  std::vector<std::string> names;
  for (const RoleSpec& role : r.spec->roles) names.push_back(role.name);
  EXPECT_THAT(names, ElementsAre("zeta", "alpha", "mid"));

  ParseResult ordered = ParseJobSpec(nlohmann::ordered_json::parse(text));
  ASSERT_TRUE(ordered.spec);
  EXPECT_EQ(ordered.spec->roles[0].name, "zeta");
  // nlohmann::json sorts keys: documented, roles come alphabetically.
  ParseResult sorted = ParseJobSpec(nlohmann::json::parse(text));
  ASSERT_TRUE(sorted.spec);
  EXPECT_EQ(sorted.spec->roles[0].name, "alpha");
}

TEST(JobSpecParser, DefaultsAreFilledIn) {
  ParseResult r = ParseJobSpecText(R"({"name": "d", "roles": {
      "a": {"command": ["x"], "replicas": 3, "gpus_per_replica": 2, "restart": {"policy": "always", "backoff_s": 45}},
      "b": {"worker": "rollout", "args": ["--model", "tiny"], "gpus_per_replica": 1},
      "c": {"command": ["y"]}}})",
                                   ParseOptions{ParseOptions::AllWorkerKinds()});
  ASSERT_TRUE(r.spec) << r.ToStatus().message();
  const JobSpec& s = *r.spec;
  EXPECT_EQ(s.backend.kind, BackendKind::kLocal);
  EXPECT_THAT(s.devices, ElementsAre(0, 1, 2, 3, 4, 5, 6)) << "default devices: what the roles need";
  EXPECT_EQ(s.run_dir, "");
  EXPECT_EQ(s.roles[0].restart.kind, RestartPolicy::Kind::kAlways);
  EXPECT_EQ(s.roles[0].restart.max_restarts, 3);
  EXPECT_DOUBLE_EQ(s.roles[0].restart.backoff_initial_s, 45);
  EXPECT_DOUBLE_EQ(s.roles[0].restart.backoff_max_s, 45) << "the default cap is never below backoff_s";
  EXPECT_EQ(s.roles[1].worker, "rollout");
  EXPECT_TRUE(s.roles[1].command.empty());
  EXPECT_THAT(s.roles[1].args, ElementsAre("--model", "tiny"));
  EXPECT_EQ(s.roles[2].replicas, 1);
  EXPECT_EQ(s.roles[2].gpus_per_replica, 0);
  EXPECT_EQ(s.roles[2].ports, 0);
  EXPECT_EQ(s.roles[2].restart.kind, RestartPolicy::Kind::kNever);
}

TEST(JobSpecParser, IntegralNumbersWrittenAsFloatsAreIntegers) {
  // JSON Schema's "integer" accepts 2.0; so must we, to agree with ajv.
  ParseResult r = ParseJobSpecText(R"({"name": "f", "roles": {"a": {"command": ["x"], "replicas": 2.0, "ports": 1e0}}})");
  ASSERT_TRUE(r.spec) << r.ToStatus().message();
  EXPECT_EQ(r.spec->roles[0].replicas, 2);
  EXPECT_EQ(r.spec->roles[0].ports, 1);
}

TEST(JobSpecParser, ExplicitDeviceIdsKeepTheirOrder) {
  ParseResult r = ParseJobSpecText(R"({"name": "e", "devices": {"ids": [3, 1, 2]},
      "roles": {"a": {"command": ["x"], "gpus_per_replica": 2}}})");
  ASSERT_TRUE(r.spec) << r.ToStatus().message();
  EXPECT_THAT(r.spec->devices, ElementsAre(3, 1, 2));
}

TEST(JobSpecParser, BackendOptionsAreKeptForTheBackend) {
  ParseResult r = ParseJobSpecText(R"({"name": "s", "backend": {"kind": "slurm", "partition": "gpu",
      "time": "1-02:00:00", "nodes": 2, "exclusive": true, "sbatch_args": ["--mem=0"]},
      "roles": {"a": {"command": ["x"]}}})");
  ASSERT_TRUE(r.spec) << r.ToStatus().message();
  EXPECT_EQ(r.spec->backend.kind, BackendKind::kSlurm);
  EXPECT_EQ(r.spec->backend.options.at("partition"), "gpu");
  EXPECT_EQ(r.spec->backend.options.at("nodes"), 2);
  EXPECT_FALSE(r.spec->backend.options.contains("kind"));
}

TEST(JobSpecParser, TheIssuesErrorMessageWordForWord) {
  EXPECT_THAT(Errors(R"({"name": "d", "roles": {"actor": {"command": ["x"], "replicas": "two"}}})"),
              ElementsAre(R"(roles.actor.replicas: expected an integer >= 1, got "two")"));
}

TEST(JobSpecParser, ReportsEveryViolationNotOnlyTheFirst) {
  auto errors = Errors(R"({"name": "bad name!", "devices": {"count": -1}, "extra": 1,
      "env": {"TANDEM_RANK": "3"},
      "roles": {"actor": {"command": [], "replicas": 0, "ports": 65, "restart": {"policy": "sometimes"}}}})");
  EXPECT_THAT(Joined(errors), HasSubstr("name: expected a job name"));
  EXPECT_THAT(Joined(errors), HasSubstr("devices.count: expected an integer >= 0, got -1"));
  EXPECT_THAT(Joined(errors), HasSubstr("extra: unknown key"));
  EXPECT_THAT(Joined(errors), HasSubstr("env.TANDEM_RANK: TANDEM_* variables are set by tandem"));
  EXPECT_THAT(Joined(errors), HasSubstr("roles.actor.command: expected a non-empty array of strings"));
  EXPECT_THAT(Joined(errors), HasSubstr("roles.actor.replicas: expected an integer >= 1, got 0"));
  EXPECT_THAT(Joined(errors), HasSubstr("roles.actor.ports: expected an integer <= 64, got 65"));
  EXPECT_THAT(Joined(errors), HasSubstr(R"(roles.actor.restart.policy: expected one of "never", "on-failure", "always", got "sometimes")"));
  EXPECT_EQ(errors.size(), 8u) << Joined(errors);
  ParseResult r = ParseJobSpecText(R"({"name": 1})");
  EXPECT_FALSE(r.spec.has_value());
  Status st = r.ToStatus();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "name: expected a job name (1-63 letters, digits, '_', '.' or '-', starting "
                          "with a letter or digit), got 1\nroles: required key is missing");
}

struct ErrorCase {
  const char* what;
  const char* spec;
  const char* expected;  // a substring of one error line
};
void PrintTo(const ErrorCase& c, std::ostream* os) { *os << c.what; }


class JobSpecErrors : public ::testing::TestWithParam<ErrorCase> {};

// Every worker the format knows is in this build's tandem-worker; a build
// with fewer (ParseOptions::workers) refuses the others by name.
TEST(JobSpecWorkers, AWorkerThisBuildLacksIsRefusedNamingThoseItHas) {
  ParseResult r = ParseJobSpecText(R"({"name": "t", "roles": {"a": {"worker": "actor"}}})",
                                   ParseOptions{{"probe", "sft", "rollout", "teacher"}});
  EXPECT_FALSE(r.spec.has_value());
  std::string all;
  for (const auto& e : r.errors) all += e.ToString() + "\n";
  EXPECT_THAT(all, HasSubstr(R"(roles.a.worker: this build's tandem-worker has no "actor" worker; it has "probe", "sft", "rollout", "teacher")"));
  for (const auto& e : ParseJobSpecText(R"({"name": "t", "roles": {"a": {"worker": "actor", "gpus_per_replica": 1}}})").errors)
    EXPECT_THAT(e.ToString(), Not(HasSubstr("this build"))) << "this build has the actor";
}

TEST_P(JobSpecErrors, ReportsThePathAndWhatWasExpected) {
  const ErrorCase& c = GetParam();
  ParseResult r = ParseJobSpecText(c.spec);
  EXPECT_FALSE(r.spec.has_value());
  EXPECT_THAT(Joined(Errors(c.spec)), HasSubstr(c.expected));
}

// Short role bodies, wrapped into a spec with ROLE.
#define SPEC(roles) R"({"name": "t", "roles": {)" roles "}}"

INSTANTIATE_TEST_SUITE_P(
    Table, JobSpecErrors,
    ::testing::Values(
        ErrorCase{"not json", "{\"name\": ", "not valid JSON (byte 10): parse error at line 1, column 10"},
        ErrorCase{"not an object", "[1, 2]", "expected a JSON object (the job spec), got an array"},
        ErrorCase{"unknown top-level key, close", R"({"name": "t", "role": {}, "roles": {"a": {"command": ["x"]}}})",
                  R"(role: unknown key; did you mean "roles"?)"},
        ErrorCase{"unknown role key", SPEC(R"("a": {"command": ["x"], "gpus": 1})"),
                  R"(roles.a.gpus: unknown key; expected one of "command", "worker")"},
        ErrorCase{"odd key quoted", SPEC(R"("a": {"command": ["x"], "a b": 1})"),
                  R"(roles.a["a b"]: unknown key)"},
        ErrorCase{"command and worker", SPEC(R"("a": {"command": ["x"], "worker": "actor"})"),
                  R"(roles.a: expected exactly one of "command" or "worker", got both)"},
        ErrorCase{"neither", SPEC(R"("a": {"replicas": 1})"), "got neither"},
        ErrorCase{"args without worker", SPEC(R"("a": {"command": ["x"], "args": ["y"]})"),
                  R"(roles.a.args: only allowed with "worker")"},
        ErrorCase{"unknown worker", SPEC(R"("a": {"worker": "critic"})"),
                  R"(roles.a.worker: expected one of "actor", "rollout", "teacher", "probe", "sft", "proxy", got "critic")"},
        ErrorCase{"empty program", SPEC(R"("a": {"command": ["", "x"]})"),
                  "roles.a.command[0]: expected a non-empty string (the program)"},
        ErrorCase{"argv not strings", SPEC(R"("a": {"command": ["x", 3]})"),
                  "roles.a.command[1]: expected a string, got 3"},
        ErrorCase{"NUL in argv", SPEC(R"("a": {"command": ["x", "a\u0000b"]})"),
                  "roles.a.command[1]: expected a string without NUL characters"},
        ErrorCase{"CUDA_VISIBLE_DEVICES", SPEC(R"("a": {"command": ["x"], "env": {"CUDA_VISIBLE_DEVICES": "0"}})"),
                  "roles.a.env.CUDA_VISIBLE_DEVICES: CUDA_VISIBLE_DEVICES is set by tandem"},
        ErrorCase{"bad env name", SPEC(R"("a": {"command": ["x"], "env": {"1X": "0"}})"),
                  "roles.a.env.1X: expected a variable name matching [A-Za-z_][A-Za-z0-9_]*"},
        ErrorCase{"env value not a string", SPEC(R"("a": {"command": ["x"], "env": {"X": 1}})"),
                  "roles.a.env.X: expected a string, got 1"},
        ErrorCase{"replica_env length", SPEC(R"("a": {"command": ["x"], "replicas": 2, "replica_env": [{}]})"),
                  "roles.a.replica_env: expected 2 entries (one per replica, replicas is 2), got 1"},
        ErrorCase{"replica_env entry", SPEC(R"("a": {"command": ["x"], "replica_env": [{"TANDEM_X": "1"}]})"),
                  "roles.a.replica_env[0].TANDEM_X: TANDEM_* variables"},
        ErrorCase{"a kernel choice in env", SPEC(R"("a": {"worker": "actor", "env": {"TANDEM_MOE_EXPERTS": "grouped-mm"}})"),
                  "roles.a.env.TANDEM_MOE_EXPERTS: TANDEM_* variables are set by tandem and may not be set in a spec "
                  "(give the workers' args --moe-experts instead)"},
        ErrorCase{"the paged attention choice in env",
                  SPEC(R"("a": {"worker": "rollout", "env": {"TANDEM_PAGED_ATTENTION": "auto"}})"),
                  "roles.a.env.TANDEM_PAGED_ATTENTION: TANDEM_* variables are set by tandem and may not be set in a "
                  "spec (give the workers' args --paged-attention instead)"},
        ErrorCase{"fractional replicas", SPEC(R"("a": {"command": ["x"], "replicas": 1.5})"),
                  "roles.a.replicas: expected an integer >= 1, got 1.5"},
        ErrorCase{"too many replicas", SPEC(R"("a": {"command": ["x"], "replicas": 100001})"),
                  "roles.a.replicas: expected an integer <= 100000, got 100001"},
        ErrorCase{"restart without policy", SPEC(R"("a": {"command": ["x"], "restart": {"max_restarts": 1}})"),
                  "roles.a.restart.policy: required key is missing"},
        ErrorCase{"negative max_restarts", SPEC(R"("a": {"command": ["x"], "restart": {"policy": "always", "max_restarts": -1}})"),
                  "roles.a.restart.max_restarts: expected an integer >= 0, got -1"},
        ErrorCase{"backoff order", SPEC(R"("a": {"command": ["x"], "restart": {"policy": "always", "backoff_s": 10, "backoff_max_s": 5}})"),
                  "roles.a.restart.backoff_max_s: expected a number >= backoff_s (10), got 5"},
        ErrorCase{"backoff type", SPEC(R"("a": {"command": ["x"], "restart": {"policy": "always", "backoff_s": "1s"}})"),
                  R"(roles.a.restart.backoff_s: expected a number >= 0, got "1s")"},
        ErrorCase{"bad role name", SPEC(R"("a.b": {"command": ["x"]})"),
                  R"(roles["a.b"]: expected a role name)"},
        ErrorCase{"no roles", R"({"name": "t", "roles": {}})", "roles: expected at least one role"},
        ErrorCase{"colocate unknown", SPEC(R"("a": {"command": ["x"]}, "b": {"command": ["x"], "colocate_with": "c"})"),
                  R"(roles.b.colocate_with: expected the name of another role (a, b), got "c")"},
        ErrorCase{"colocate self", SPEC(R"("a": {"command": ["x"], "colocate_with": "a"})"),
                  "roles.a.colocate_with: a role cannot colocate with itself"},
        ErrorCase{"cycle", SPEC(R"("o": {"command": ["x"]}, "a": {"command": ["x"], "colocate_with": "b"}, "b": {"command": ["x"], "colocate_with": "a"})"),
                  "roles.a.colocate_with: colocation cycle a -> b -> a"},
        ErrorCase{"group too small", SPEC(R"("a": {"command": ["x"], "gpus_per_replica": 2}, "b": {"command": ["x"], "replicas": 2, "gpus_per_replica": 2, "colocate_with": "a"})"),
                  R"(roles.b: needs 4 devices (2 replicas x 2 gpus_per_replica), more than the 2 of its colocation group (owner "a")"},
        ErrorCase{"gpu role with cpu owner", SPEC(R"("a": {"command": ["x"]}, "b": {"command": ["x"], "gpus_per_replica": 1, "colocate_with": "a"})"),
                  R"(roles.b.colocate_with: a role with GPUs (gpus_per_replica 1) cannot colocate with CPU-only role "a")"},
        ErrorCase{"devices too few", R"({"name": "t", "devices": {"count": 2}, "roles": {"a": {"command": ["x"], "gpus_per_replica": 2}, "b": {"command": ["x"], "gpus_per_replica": 1}}})",
                  R"(devices: the roles need 3 devices (group of "a": 2, group of "b": 1) but the job has 2)"},
        ErrorCase{"devices both", R"({"name": "t", "devices": {"count": 2, "ids": [0]}, "roles": {"a": {"command": ["x"]}}})",
                  R"(devices: expected exactly one of "count" (a number of devices) or "ids" (a list of logical ids), got both)"},
        ErrorCase{"duplicate ids", R"({"name": "t", "devices": {"ids": [0, 1, 0]}, "roles": {"a": {"command": ["x"]}}})",
                  "devices.ids[2]: expected distinct ids, got 0 twice"},
        ErrorCase{"backend kind", R"({"name": "t", "backend": {"kind": "k8s"}, "roles": {"a": {"command": ["x"]}}})",
                  R"(backend.kind: expected one of "local", "slurm", "redis", got "k8s")"},
        ErrorCase{"local options", R"({"name": "t", "backend": {"kind": "local", "partition": "gpu"}, "roles": {"a": {"command": ["x"]}}})",
                  "backend.partition: unknown key"},
        ErrorCase{"slurm time", R"({"name": "t", "backend": {"kind": "slurm", "time": "1h"}, "roles": {"a": {"command": ["x"]}}})",
                  R"(backend.time: expected a Slurm time limit (M, M:S, H:M:S, D-H, D-H:M or D-H:M:S), got "1h")"},
        ErrorCase{"redis url", R"({"name": "t", "backend": {"kind": "redis", "url": "http://x"}, "roles": {"a": {"command": ["x"]}}})",
                  R"(backend.url: expected a redis://, rediss:// or unix:// URL, got "http://x")"},
        ErrorCase{"long value shortened", R"({"name": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "roles": {"a": {"command": ["x"]}}})",
                  R"(got "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"...)"}));

#undef SPEC

TEST(JobSpecParser, CrossRoleChecksWaitForValidRoleFields) {
  // A bad gpus_per_replica must not also produce a bogus "does not fit".
  auto errors = Errors(R"({"name": "t", "devices": {"count": 1}, "roles": {
      "a": {"command": ["x"], "gpus_per_replica": "4"}}})");
  EXPECT_THAT(errors, ElementsAre(R"(roles.a.gpus_per_replica: expected an integer >= 0, got "4")"));
}

TEST(JobSpecParser, HugeOrOddInputIsAnErrorNotACrash) {
  std::string deep(100000, '[');
  EXPECT_FALSE(ParseJobSpecText(deep).errors.empty());
  EXPECT_FALSE(ParseJobSpecText("").errors.empty());
  EXPECT_FALSE(ParseJobSpecText("{\"name\": 1e999}").errors.empty());
  EXPECT_FALSE(ParseJobSpecText("{\"name\": \"\xff\"}").errors.empty());
  std::string nested = "{\"name\":\"n\",\"roles\":{\"a\":{\"command\":[\"x\"],\"env\":" +
                       std::string(5000, '[') + std::string(5000, ']') + "}}}";
  // Nesting is bounded before the spec is read (common/bounded_json.h).
  EXPECT_THAT(Joined(Errors(nested)), HasSubstr("JSON nested deeper than 64 levels (the limit)"));
}

}  // namespace
}  // namespace tandem::spec
