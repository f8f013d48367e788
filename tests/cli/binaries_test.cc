// What each binary says about itself, run as a user runs it: `--version` of
// tandem, tandemd and tandem-worker is CMake's project version; the workers
// tandem-worker has are the table the spec parser checks "worker" against
// (common/native_workers.h); a spec naming a worker this build lacks is
// refused by `tandem validate` and by tandemd's submit, with the workers it
// has, instead of validating and then failing at launch.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "common/native_workers.h"
#include "tests/cli/cli_process.h"

namespace tandem::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class Binaries : public ::testing::Test {
 protected:
  void SetUp() override { tmp_ = MakeTempDir("cli-binaries"); }
  void TearDown() override { fs::remove_all(tmp_); }
  fs::path tmp_;
};

TEST_F(Binaries, VersionIsTheProjectVersion) {
  for (const std::string program : {"tandem", "tandemd", "tandem-worker"}) {
    SCOPED_TRACE(program);
    CliRun r = RunBinary(tmp_, program, {"--version"});
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.out, program + " " + TANDEM_PROJECT_VERSION + "\n");
  }
}

TEST_F(Binaries, TandemWorkerHasExactlyTheWorkersOfTheTable) {
  CliRun r = RunBinary(tmp_, "tandem-worker", {"--list-workers"});
  ASSERT_EQ(r.rc, 0) << r.err;
  std::vector<std::string> listed;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) listed.push_back(line);
  EXPECT_EQ(listed, NativeWorkerNames()) << "tandem-worker's subcommands and common/native_workers.h disagree";

  CliRun none = RunBinary(tmp_, "tandem-worker", {});
  EXPECT_EQ(none.rc, 2);
  EXPECT_THAT(none.err, HasSubstr("name a worker: probe"));
}

// --tree-attention, --moe-experts, --decode-gemv, --paged-attention and --paged-splits, before or after the subcommand, set
// the variables the ops read (workers/ops/kernel_choices.h); another name
// is refused with the choices.
TEST_F(Binaries, TandemWorkerPicksKernelsByFlag) {
  CliRun r = RunBinary(tmp_, "tandem-worker", {"--moe-experts", "grouped-mm", "--list-workers"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("CUDA kernels: TANDEM_MOE_EXPERTS=grouped-mm"));
  CliRun after = RunBinary(tmp_, "tandem-worker", {"probe", "--tree-attention", "varlen-flash", "--tag", "weights=1KiB", "--backend", "cpu", "--cycles", "0"});
  EXPECT_EQ(after.rc, 0) << after.err;
  EXPECT_THAT(after.err, HasSubstr("CUDA kernels: TANDEM_TREE_ATTENTION=varlen-flash"));
  CliRun bad = RunBinary(tmp_, "tandem-worker", {"actor", "--tree-attention", "flash"});
  EXPECT_NE(bad.rc, 0);
  EXPECT_THAT(bad.err, HasSubstr("--tree-attention: flash not in {tiles,varlen-flash,"));
  // `--FLAG VALUE --list-workers`: taken, and the variable set as `says`; or refused, saying so.
  const auto picks = [&](const std::string& flag, const std::string& value, bool taken, const std::string& says) {
    CliRun run = RunBinary(tmp_, "tandem-worker", {flag, value, "--list-workers"});
    EXPECT_EQ(run.rc == 0, taken) << flag << " " << value << ": " << run.err;
    EXPECT_THAT(run.err, HasSubstr(says));
  };
  picks("--decode-gemv", "off", true, "CUDA kernels: TANDEM_DECODE_GEMV=off");
  picks("--decode-gemv", "serial", true, "CUDA kernels: TANDEM_DECODE_GEMV=serial");
  picks("--decode-gemv", "maybe", false, "--decode-gemv: maybe not in {on,off,serial}");
  picks("--paged-attention", "tiles", true, "CUDA kernels: TANDEM_PAGED_ATTENTION=tiles");
  picks("--paged-attention", "warps", false, "--paged-attention: warps not in {auto,tiles,mma}");
  picks("--paged-splits", "cluster", true, "CUDA kernels: TANDEM_PAGED_SPLITS=cluster");
  picks("--paged-splits", "many", false, "--paged-splits: many not in {combine,cluster}");
}

// A colocated job whose trainer role names a worker that no tandem-worker
// has (this build has every worker the format knows: "actor" included).
nlohmann::json UnknownWorkerSpec() {
  return nlohmann::json::parse(R"({"name": "rl", "roles": {
      "rollout": {"worker": "probe", "args": ["--tag", "weights=1MiB"], "gpus_per_replica": 1},
      "trainer": {"worker": "critic", "gpus_per_replica": 1, "colocate_with": "rollout"}}})");
}

constexpr const char* kRefusal =
    R"(roles.trainer.worker: expected one of "actor", "rollout", "teacher", "probe", "sft", "proxy", got "critic")";

TEST_F(Binaries, ValidateRefusesAWorkerThereIsNot) {
  const fs::path spec = tmp_ / "rl.json";
  std::ofstream(spec) << UnknownWorkerSpec().dump(2);
  CliRun r = RunBinary(tmp_, "tandem", {"validate", spec.string()});
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr(kRefusal));
}

// A run dir's events.jsonl may hold lines a task wrote: fields of any type,
// deep nesting, a huge line. `tandem events RUN_DIR` prints the events it
// can and skips what is not one, never throwing or overflowing its stack.
TEST_F(Binaries, EventsOfARunDirSurviveLinesATaskWrote) {
  const fs::path run = tmp_ / "run";
  fs::create_directories(run);
  std::ofstream(run / "events.jsonl")
      << R"({"seq":1,"at":"noon","type":"job_state","state":7,"detail":["x"]})" << "\n"
      << R"({"seq":2,"type":"job_submitted","job":{"name":3,"tasks":"many"}})" << "\n"
      << R"({"seq":3,"type":"job_devices"})" << "\n"
      << R"({"seq":4,"type":"task_state","task":"actor.0","state":"running","ref":[1],"ports":5})" << "\n"
      << R"({"seq":5,"type":"job_submitted","job":[]})" << "\n"
      << "{\"a\":" << std::string(100000, '[') << std::string(100000, ']') << "}\n"
      << std::string(2 << 20, 'x') << "\n"
      << "[1,2]\n"
      << R"({"seq":6,"at":1700000000000,"type":"job_state","state":"succeeded"})" << "\n";
  CliRun r = RunBinary(tmp_, "tandem", {"events", run.string()});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("job succeeded"));
  EXPECT_THAT(r.out, HasSubstr("job submitted   tasks=0"));
  EXPECT_THAT(r.out, HasSubstr("devices released"));
  EXPECT_THAT(r.out, HasSubstr("actor.0        running"));
}

TEST_F(Binaries, TandemdRefusesTheSubmitInsteadOfFailingAtLaunch) {
  DaemonProcess d(tmp_ / "state", {"--gpus", "0"});
  d.Start();
  auto r = d.client().Request("POST", "/v1/jobs", UnknownWorkerSpec().dump());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_THAT(r->body, HasSubstr(R"(expected one of \"actor\", \"rollout\", \"teacher\", \"probe\", \"sft\", \"proxy\", got \"critic\")"));
}

}  // namespace
}  // namespace tandem::testing
