// The real `tandem` binary on a run directory and on a job id of a real
// tandemd: `tandem residency` (text and --json), `tandem events --handoff`,
// `tandem timeline -o`, and what a user sees when something is missing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <fstream>

#include "orchestrator/report/run_logs.h"
#include "orchestrator/report/tests/run_fixture.h"
#include "tests/daemon/daemon_process.h"

namespace tandem::report::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::tandem::testing::BinDir;
using ::tandem::testing::DaemonProcess;
using ::tandem::testing::MakeTempDir;
using ::tandem::testing::ReadFile;

struct CliRun {
  int rc = -1;
  std::string out, err;
};

// Runs `tandem ARGS` (arguments are single-quoted for the shell).
CliRun Tandem(const fs::path& tmp, const std::vector<std::string>& args) {
  std::string cmd = "'" + (BinDir() / "tandem").string() + "'";
  for (const std::string& a : args) cmd += " '" + a + "'";
  const fs::path out = tmp / "cmd.out", err = tmp / "cmd.err";
  cmd += " >'" + out.string() + "' 2>'" + err.string() + "'";
  const int status = std::system(cmd.c_str());
  CliRun r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = ReadFile(out);
  r.err = ReadFile(err);
  return r;
}

class ReportCli : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = MakeTempDir("report-cli");
    run_ = tmp_ / "run";
    WriteRun(run_, {.leak_in_train = true});
  }
  void TearDown() override { fs::remove_all(tmp_); }
  fs::path tmp_, run_;
};

TEST_F(ReportCli, ResidencyOfARunDirShowsEachGpuItsHoldersPeakAndLeaks) {
  CliRun r = Tandem(tmp_, {"residency", run_.string()});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("GPU 0  device"));
  EXPECT_THAT(r.out, HasSubstr("GPU 1  device"));
  EXPECT_THAT(r.out, HasSubstr("rollout/1  kv_cache    30 B"));
  EXPECT_THAT(r.out, HasSubstr("peak 70 B at"));
  EXPECT_THAT(r.out, HasSubstr("(TRAIN): actor/0 params 20 B, actor/0 grads 20 B, actor/0 optimizer 30 B"));
  EXPECT_THAT(r.out, HasSubstr("LEAKS"));
  EXPECT_EQ(r.err, "");

  CliRun j = Tandem(tmp_, {"residency", run_.string(), "--json"});
  ASSERT_EQ(j.rc, 0) << j.err;
  auto json = nlohmann::json::parse(j.out);
  ASSERT_EQ(json["gpus"].size(), 2u);
  EXPECT_EQ(json["gpus"][0]["gpu"], 0);
  EXPECT_EQ(json["gpus"][0]["ledger_bytes"], 55);
  EXPECT_EQ(json["gpus"][0]["peak"]["phase"], "TRAIN");
  EXPECT_GT(json["leaks"].get<int>(), 0);
}

TEST_F(ReportCli, EventsHandoffPrintsOneLinePerCommandUnderPhaseHeaders) {
  auto logs = ReadRunLogs(run_.string());
  ASSERT_TRUE(logs.ok());
  CliRun r = Tandem(tmp_, {"events", run_.string(), "--handoff"});
  ASSERT_EQ(r.rc, 0) << r.err;
  size_t lines = 0, headers = 0;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("== group", 0) == 0) ++headers;
    else if (line.rfind("TIME", 0) != 0) ++lines;
  }
  EXPECT_EQ(lines, logs->handoff.size());
  EXPECT_EQ(headers, 5u);  // ROLLOUT TEACHER(0) TRAIN SYNC(1) ROLLOUT
  EXPECT_THAT(r.out, HasSubstr("== group actor: TRAIN"));
  EXPECT_THAT(r.out, HasSubstr("publish_weights v1"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("release_inference +rollout/0 +release +kv_cache +30 B"));

  // Without --handoff the run dir's state changes are printed as before, with a hint.
  std::ofstream(run_ / "events.jsonl") << R"({"type":"job_state","state":"succeeded","at":1764482000000})" << "\n";
  CliRun plain = Tandem(tmp_, {"events", run_.string()});
  EXPECT_EQ(plain.rc, 0);
  EXPECT_THAT(plain.out, HasSubstr("job succeeded"));
  EXPECT_THAT(plain.err, HasSubstr("--handoff"));
}

TEST_F(ReportCli, TimelineWritesOneSelfContainedPage) {
  const fs::path page = tmp_ / "timeline.html";
  CliRun r = Tandem(tmp_, {"timeline", run_.string(), "-o", page.string()});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("wrote " + page.string()));
  const std::string html = ReadFile(page);
  EXPECT_THAT(html, HasSubstr("<svg"));  // built by the page's script
  EXPECT_THAT(html, HasSubstr("id=\"tandem-data\""));
  for (const char* external : {"src=", "href=", "<link", "@import", "fetch(", "XMLHttpRequest"}) {
    EXPECT_THAT(html, ::testing::Not(HasSubstr(external))) << external;
  }
}

TEST_F(ReportCli, BadLinesAreWarningsAndMissingLogsAreErrors) {
  std::ofstream(run_ / "residency.jsonl", std::ios::app) << R"({"v":1,"group":"act)";
  CliRun r = Tandem(tmp_, {"residency", run_.string()});
  EXPECT_EQ(r.rc, 0);
  EXPECT_THAT(r.err, HasSubstr("warning: residency.jsonl:"));
  EXPECT_THAT(r.err, HasSubstr("torn line"));

  fs::create_directories(tmp_ / "empty");
  CliRun e = Tandem(tmp_, {"residency", (tmp_ / "empty").string()});
  EXPECT_EQ(e.rc, 1);
  EXPECT_THAT(e.err, HasSubstr("no handoff.jsonl or residency.jsonl"));

  // --handoff reads a file once; following it is not offered.
  CliRun f = Tandem(tmp_, {"events", run_.string(), "--handoff", "-f"});
  EXPECT_EQ(f.rc, 2);

  // Not a directory, and no daemon to ask: exit 3, saying both.
  CliRun u = Tandem(tmp_, {"timeline", "no-such-job", "--socket", (tmp_ / "none.sock").string()});
  EXPECT_EQ(u.rc, 3);
  EXPECT_THAT(u.err, HasSubstr("not a run directory"));
}

TEST_F(ReportCli, AJobIdIsLookedUpInTheDaemonAndItsRunDirRead) {
  DaemonProcess d(tmp_ / "state", {"--gpus", "none"});
  d.Start();
  const std::string id = d.Submit(::tandem::testing::BashJob("colocated", "true"));
  ASSERT_EQ(d.WaitJob(id), "succeeded");
  const std::string run_dir = d.Job(id).value("run_dir", "");
  ASSERT_FALSE(run_dir.empty());
  WriteRun(run_dir);
  const std::string sock = (tmp_ / "state" / "tandemd.sock").string();

  CliRun r = Tandem(tmp_, {"residency", id, "--socket", sock});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("run dir " + run_dir));
  EXPECT_THAT(r.out, HasSubstr("GPU 1"));
  CliRun e = Tandem(tmp_, {"events", id, "--handoff", "--socket", sock});
  ASSERT_EQ(e.rc, 0) << e.err;
  EXPECT_THAT(e.out, HasSubstr("== group actor: ROLLOUT"));
  CliRun t = Tandem(tmp_, {"timeline", id, "--socket", sock, "-o", (tmp_ / "t.html").string()});
  ASSERT_EQ(t.rc, 0) << t.err;
  EXPECT_TRUE(fs::exists(tmp_ / "t.html"));

  CliRun unknown = Tandem(tmp_, {"residency", "job-does-not-exist", "--socket", sock});
  EXPECT_EQ(unknown.rc, 5);
  EXPECT_THAT(unknown.err, HasSubstr("not a run directory"));
}

// The legend says what "device" (a device-wide reading) is against the
// ledger, and the spec's handoff.gpu_memory (from job.json) is each GPU's
// capacity.
TEST_F(ReportCli, ResidencyExplainsDeviceReadingsAndShowsTheSpecsCapacity) {
  CliRun r = Tandem(tmp_, {"residency", run_.string()});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("device: the GPU's own reading"));
  EXPECT_THAT(r.out, HasSubstr("untracked = device used - ledger"));
  EXPECT_THAT(r.out, HasSubstr("capacity: the device's total (the spec sets no handoff.gpu_memory)"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("worker-reported:")));

  std::ofstream(run_ / "job.json") << R"({"id": "j", "spec": {"name": "j", "roles": {},
                                         "handoff": {"gpu_memory": "512MiB"}}})";
  CliRun cap = Tandem(tmp_, {"residency", run_.string()});
  ASSERT_EQ(cap.rc, 0) << cap.err;
  EXPECT_THAT(cap.out, HasSubstr("B  capacity 512.0 MiB (handoff.gpu_memory)\n"));
  EXPECT_THAT(cap.out, HasSubstr("capacity: the spec's handoff.gpu_memory, per GPU."));
  auto j = nlohmann::json::parse(Tandem(tmp_, {"residency", run_.string(), "--json"}).out);
  EXPECT_EQ(j["gpus"][0]["capacity"], 512u << 20);
}

// A CPU probe reports its own pools: shown as worker-reported, with the
// worker named, and the legend says it is not the GPU's total.
TEST_F(ReportCli, ResidencyNamesTheWorkerOfAWorkerReportedReading) {
  const fs::path run = tmp_ / "cpu";
  fs::create_directories(run);
  std::ofstream(run / "residency.jsonl")
      << R"({"bytes":1048576,"delta":1048576,"devices":[{"gpu":0,"total":8388608,"used":1048576,"device_wide":false}],)"
         R"("gpus":[0],"group":"actor","leak":false,"rank":1,"role":"rollout","tag":"weights","ts":1764482003.0,"v":1})"
      << "\n";
  CliRun r = Tandem(tmp_, {"residency", run.string()});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("GPU 0  worker-reported 1.0 MiB used of 8.0 MiB (rollout/1, at "));
  EXPECT_THAT(r.out, HasSubstr("worker-reported: no device-wide reading (CPU workers)"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("untracked")));
}

}  // namespace
}  // namespace tandem::report::testing
