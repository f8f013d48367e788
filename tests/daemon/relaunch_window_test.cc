// A task never runs twice across a crash of the daemon (issue #12 point 2),
// in both containment modes (docs/processes.md): tandemd is killed (-9, by
// the test-only fault point `local.after_start`, backends/fault_injection.h)
// right after a task's process started and before its `task_state running`
// record was journaled, the worst moment: the restarted daemon knows the task
// only as pending and launches it again. The first copy must be gone before
// the second runs, in cgroup mode (its cgroup is emptied) and in marker mode
// (TANDEM_CGROUPS=off: the processes carrying the task's slot are killed).
// Real tandemd processes, real tasks.
#include <cstdlib>
#include <optional>

#include "tests/daemon/daemon_process.h"

namespace tandem::testing {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// Sets an environment variable for the daemons this test starts (they copy
// this process's environment) and restores it at the end of the scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* key, const char* value) : key_(key) {
    if (const char* old = std::getenv(key)) old_ = old;
    if (value) ::setenv(key, value, 1);
    else ::unsetenv(key);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(key_, old_->c_str(), 1);
    else ::unsetenv(key_);
  }

 private:
  const char* key_;
  std::optional<std::string> old_;
};

std::vector<pid_t> Pids(const fs::path& file) {
  std::vector<pid_t> out;
  std::ifstream in(file);
  for (pid_t p; in >> p;) out.push_back(p);
  return out;
}

class RelaunchWindow : public ::testing::TestWithParam<std::string> {};

TEST_P(RelaunchWindow, DaemonKilledBeforeTheRunningRecordNeverRunsATaskTwice) {
  const bool marker = GetParam() == "marker";
  ScopedEnv cgroups("TANDEM_CGROUPS", marker ? "off" : nullptr);
  const fs::path dir = MakeTempDir("tandem-relaunch");
  const fs::path runs = dir / "runs.txt", go = dir / "go";
  // However the test ends, the tasks end too.
  struct Release {
    fs::path go;
    ~Release() { std::ofstream(go) << "go"; }
  } release{go};
  // Each run appends its pid, then waits for the go file; a child in its own
  // session (setsid) waits too: the whole run must go, not only its leader.
  const std::string script = "echo $$ >> " + runs.string() + "; setsid sleep 600 & while [ ! -e " + go.string() +
                             " ]; do sleep 0.05; done; kill $! 2>/dev/null; exit 0";
  json spec = BashJob("twice", script);
  {
    ScopedEnv faults("TANDEM_TEST_FAULTS", "local.after_start");
    DaemonProcess d(dir);
    d.Start();
    // The 201 may or may not arrive: the daemon dies as it launches the task.
    (void)d.client(5).Request("POST", "/v1/jobs", spec.dump());
    ASSERT_TRUE(WaitFor([&] { return !ProcessAlive(d.pid()); })) << "the fault point did not fire:\n" << d.log();
    EXPECT_NE(d.log().find("point=local.after_start reached"), std::string::npos) << d.log();
    d.Kill9();  // reaps it
  }
  // The first copy runs, unknown to the journal.
  ASSERT_TRUE(WaitFor([&] { return Pids(runs).size() == 1; })) << "the first copy did not start";
  const pid_t first = Pids(runs)[0];
  ASSERT_TRUE(ProcessAlive(first));

  DaemonProcess d(dir);
  d.Start();
  auto health = d.client().Request("GET", "/healthz");
  ASSERT_TRUE(health.ok()) << health.status().ToString();
  const std::string mode = health->Json()["process_containment"].value("mode", "");
  if (mode != GetParam()) GTEST_SKIP() << "no writable cgroup2 here: the daemon runs in mode " << mode;
  auto list = d.client().Request("GET", "/v1/jobs");
  ASSERT_TRUE(list.ok() && list->status == 200) << d.log();
  const json jobs = list->Json();
  ASSERT_EQ(jobs["jobs"].size(), 1u) << jobs.dump();
  const std::string id = jobs["jobs"][0].value("id", "");
  // The restarted daemon launches the task again; by then the first copy is gone.
  ASSERT_TRUE(WaitFor([&] { return Pids(runs).size() == 2; })) << d.Job(id).dump(2) << d.log();
  const pid_t second = Pids(runs)[1];
  EXPECT_FALSE(ProcessAlive(first)) << "the task runs twice: pids " << first << " and " << second << "\n" << d.log();
  EXPECT_TRUE(ProcessAlive(second));
  EXPECT_NE(d.log().find(marker ? "killed processes of an earlier run task=" : "killed processes of no known task cgroup="),
            std::string::npos)
      << d.log();
  std::ofstream(go) << "go";
  EXPECT_EQ(d.WaitJob(id), "succeeded") << d.Job(id).dump(2);
  const json job = d.Job(id);
  EXPECT_EQ(job["tasks"][0].value("launches", 0), 1) << "the journal knows one launch: " << job.dump(2);
  d.Stop();
  if (!::testing::Test::HasFailure()) fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Modes, RelaunchWindow, ::testing::Values("cgroup", "marker"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace tandem::testing
