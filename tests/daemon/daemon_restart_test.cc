// kill -9 of tandemd in the middle of a job, then a restart on the same state
// dir: the job comes back in its state, running tasks are re-adopted, tasks
// that ended while the daemon was down are recorded with their exit code,
// and the job finishes with its history intact.
#include "tests/daemon/daemon_process.h"

namespace tandem::testing {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

TEST(DaemonRestart, Kill9MidJobThenRestartFinishesTheJob) {
  const fs::path dir = MakeTempDir("tandem-restart");
  const fs::path go = dir / "go";
  json spec = {{"name", "survivor"}, {"backend", {{"kind", "local"}}},
               {"roles",
                {{"waiter", {{"command", {"bash", "-c", "while [ ! -e " + go.string() + " ]; do sleep 0.05; done; echo done"}},
                             {"replicas", 2}}},
                 {"quick", {{"command", {"bash", "-c", "sleep 0.3; exit 0"}}}},
                 {"quick2", {{"command", {"bash", "-c", "sleep 0.3; exit 0"}}}}}}};
  std::string id;
  std::vector<pid_t> waiter_pids;
  // However the test ends, the waiters end too (they would outlive a failed assertion).
  struct Release {
    fs::path go;
    ~Release() { std::ofstream(go) << "go"; }
  } release{go};
  {
    DaemonProcess d(dir);
    d.Start();
    id = d.Submit(spec);
    ASSERT_TRUE(WaitFor([&] {
      json j = d.Job(id);
      int running = 0;
      for (const auto& t : j["tasks"]) running += t.value("state", "") == "running";
      return running == 4;
    }));
    const json job = d.Job(id);
    for (const auto& t : job["tasks"])
      if (t.value("role", "") == "waiter") waiter_pids.push_back(t["ref"]["data"].value("pid", 0));
    d.Kill9();
  }
  // While the daemon is down, the quick tasks end; the waiters keep running.
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  for (pid_t p : waiter_pids) {
    EXPECT_TRUE(ProcessAlive(p)) << "task " << p << " died with the daemon";
  }

  DaemonProcess d(dir);
  d.Start();
  json j = d.Job(id);
  ASSERT_TRUE(j.is_object()) << d.log();
  EXPECT_EQ(j.value("state", ""), "running");
  // The quick tasks ended while nobody watched; their exit codes come from the exit records.
  auto task = [&](const std::string& name) {
    const json now = d.Job(id);
    for (const auto& t : now["tasks"])
      if (t.value("name", "") == name) return t;
    return json();
  };
  ASSERT_TRUE(WaitFor([&] { return task("quick.0").value("state", "") == "succeeded"; })) << d.Job(id).dump(2);
  EXPECT_EQ(task("quick.0")["last_exit"].value("exit_code", -1), 0);
  EXPECT_EQ(task("quick2.0")["last_exit"].value("exit_code", -1), 0);
  // The waiters were re-adopted: same pids, still running, and their exit is seen.
  const json after = d.Job(id);
  for (const auto& t : after["tasks"]) {
    if (t.value("role", "") == "waiter") {
      EXPECT_EQ(t.value("state", ""), "running");
    }
  }
  std::ofstream(go) << "go";
  ASSERT_EQ(d.WaitJob(id), "succeeded") << d.Job(id).dump(2);
  // History: the events before the crash are still there.
  std::string events;
  ASSERT_TRUE(d.client().Stream("/v1/jobs/" + id + "/events?follow=0", [&](std::string_view s) { events.append(s); }).ok());
  EXPECT_NE(events.find("job_submitted"), std::string::npos);
  size_t runs = 0;
  for (size_t p = events.find("\"state\":\"running\""); p != std::string::npos; p = events.find("\"state\":\"running\"", p + 1)) ++runs;
  EXPECT_GE(runs, 5u);  // 4 tasks + the job
  d.Stop();
  fs::remove_all(dir);
}

TEST(DaemonRestart, TornLastJournalRecordIsSkipped) {
  const fs::path dir = MakeTempDir("tandem-torn");
  std::string id;
  {
    DaemonProcess d(dir);
    d.Start();
    id = d.Submit(BashJob("short", "echo hi"));
    ASSERT_EQ(d.WaitJob(id), "succeeded");
    d.Kill9();
  }
  // Simulate a crash in the middle of writing a record.
  std::ofstream(dir / "store" / "journal.log", std::ios::app) << "1234abcd {\"type\":\"job_st";
  DaemonProcess d(dir);
  d.Start();
  EXPECT_EQ(d.JobState(id), "succeeded");
  EXPECT_NE(d.log().find("torn"), std::string::npos) << d.log();
  // And it keeps working.
  const std::string id2 = d.Submit(BashJob("after", "true"));
  EXPECT_EQ(d.WaitJob(id2), "succeeded");
  d.Stop();
  fs::remove_all(dir);
}

TEST(DaemonRestart, SecondDaemonOnTheSameStateDirIsRefused) {
  const fs::path dir = MakeTempDir("tandem-lock");
  DaemonProcess d(dir);
  d.Start();
  const std::string cmd = (BinDir() / "tandemd").string() + " --state-dir " + dir.string() + " 2>" +
                          (dir / "second.log").string();
  EXPECT_NE(std::system(cmd.c_str()), 0);
  EXPECT_NE(ReadFile(dir / "second.log").find("another tandemd"), std::string::npos);
  d.Stop();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tandem::testing
