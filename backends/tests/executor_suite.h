// The shared executor test suite (backends/executor.h; one suite per
// interface, as Ray does): every Executor implementation runs these tests against real
// processes. The only per-backend part is the ExecutorHarness, which creates
// the executor. A backend instantiates the suite once:
//
//   INSTANTIATE_TEST_SUITE_P(Local, ExecutorSuite,
//                            ::testing::Values(LocalHarness()),
//                            ExecutorHarnessName);
//
// Tasks are plain POSIX commands (sh, env, sleep) so the suite runs wherever
// a backend runs its tasks. Include this header in exactly one test file of a binary;
// backend-specific tests include executor_test_fixture.h instead.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "backends/tests/executor_test_fixture.h"

namespace tandem::backends::testing {

class ExecutorSuite : public ExecutorTestBase, public ::testing::TestWithParam<ExecutorHarness> {
 protected:
  void SetUp() override { Init(GetParam()); }
  void TearDown() override {
    if (exec_) ExpectExactlyOnce();
  }
};

TEST_P(ExecutorSuite, ReportsExitCode) {
  auto r = Request("code", {"sh", "-c", "exit 7"});
  StartOrDie(r);
  auto x = WaitExit(r.task_id);
  ASSERT_TRUE(x);
  EXPECT_TRUE(x->status_known);
  EXPECT_EQ(x->exit_code, 7);
  EXPECT_EQ(x->signal, 0);
  EXPECT_FALSE(x->succeeded());
}

TEST_P(ExecutorSuite, ReportsSuccess) {
  auto r = Request("ok", {"true"});
  StartOrDie(r);
  auto x = WaitExit(r.task_id);
  ASSERT_TRUE(x);
  EXPECT_TRUE(x->succeeded()) << x->ToJson().dump();
}

TEST_P(ExecutorSuite, ReportsTerminatingSignal) {
  auto r = Request("sig", {"sh", "-c", "kill -USR1 $$; sleep 5"});
  StartOrDie(r);
  auto x = WaitExit(r.task_id);
  ASSERT_TRUE(x);
  EXPECT_EQ(x->signal, SIGUSR1) << x->ToJson().dump();
  EXPECT_FALSE(x->succeeded());
}

TEST_P(ExecutorSuite, CommandNotFoundExits127WithDetail) {
  for (std::string cmd : {"tandem-no-such-command", "/nonexistent/tandem-cmd"}) {
    auto r = Request("notfound", {cmd, "arg"});
    auto ref = exec_->Start(r);
    ASSERT_TRUE(ref.ok()) << "not an error at Start: " << ref.status().ToString();
    auto x = WaitExit(r.task_id);
    ASSERT_TRUE(x) << cmd;
    EXPECT_EQ(x->exit_code, 127) << cmd;
    EXPECT_NE(x->detail.find("exec failed"), std::string::npos) << x->detail;
    EXPECT_NE(x->detail.find("No such file or directory"), std::string::npos) << x->detail;
  }
}

TEST_P(ExecutorSuite, NotExecutableExits127) {
  auto script = dir_.path() / "not-executable.sh";
  std::ofstream(script) << "#!/bin/sh\nexit 0\n";
  auto r = Request("noexec", {script.string()});
  StartOrDie(r);
  auto x = WaitExit(r.task_id);
  ASSERT_TRUE(x);
  EXPECT_EQ(x->exit_code, 127);
  EXPECT_NE(x->detail.find("Permission denied"), std::string::npos) << x->detail;
}

TEST_P(ExecutorSuite, WritesStdoutStderrAndUsesCwd) {
  auto sub = dir_.path() / "work dir";
  std::filesystem::create_directories(sub);
  auto r = Request("io", {"sh", "-c", "echo to-out; echo to-err >&2; pwd"});
  r.cwd = sub;
  StartOrDie(r);
  ASSERT_TRUE(WaitExit(r.task_id));
  EXPECT_EQ(ReadWholeFile(r.stdout_path), "to-out\n" + sub.string() + "\n");
  EXPECT_EQ(ReadWholeFile(r.stderr_path), "to-err\n");
}

TEST_P(ExecutorSuite, AppendsToExistingOutput) {
  auto r = Request("append", {"echo", "second"});
  std::ofstream(r.stdout_path) << "first\n";
  StartOrDie(r);
  ASSERT_TRUE(WaitExit(r.task_id));
  EXPECT_EQ(ReadWholeFile(r.stdout_path), "first\nsecond\n");
}

TEST_P(ExecutorSuite, TaskSeesTheRequestEnvironmentAndNothingOfTheDaemons) {
  ::setenv("TANDEM_SUITE_CANARY", "leaked", 1);
  TaskEnvInput in;
  in.job_env = {{"SUITE_JOB", "j"}};
  in.rank = 3;
  in.world_size = 4;
  auto r = Request("env", {"env"}, in);
  ::unsetenv("TANDEM_SUITE_CANARY");
  StartOrDie(r);
  ASSERT_TRUE(WaitExit(r.task_id));
  std::string out = ReadWholeFile(r.stdout_path);
  for (const auto& kv : r.env) EXPECT_NE(out.find(kv + "\n"), std::string::npos) << kv;
  EXPECT_EQ(out.find("TANDEM_SUITE_CANARY"), std::string::npos) << out;
}

TEST_P(ExecutorSuite, SignalTermReachesATrappingTask) {
  auto r = Request("trap", {"bash", "-c",
                            "trap 'echo got-term; exit 0' TERM; echo ready; "
                            "while true; do sleep 0.05; done"});
  TaskRef ref = StartOrDie(r);
  ASSERT_TRUE(WaitUntil([&] { return FileContains(r.stdout_path, "ready"); }));
  ASSERT_TRUE(exec_->Signal(ref, SIGTERM).ok());
  auto x = WaitExit(r.task_id);
  ASSERT_TRUE(x);
  EXPECT_TRUE(x->succeeded()) << x->ToJson().dump();
  EXPECT_TRUE(FileContains(r.stdout_path, "got-term"));
}

TEST_P(ExecutorSuite, KillEndsTheTaskWithSigkill) {
  auto r = Request("kill", {"sleep", "30"});
  TaskRef ref = StartOrDie(r);
  EXPECT_TRUE(exec_->Alive(ref));
  auto st = exec_->Kill(ref);
  EXPECT_TRUE(st.ok()) << st.ToString();
  auto x = WaitExit(r.task_id);  // a remote backend's Kill may return before the end (executor.h)
  ASSERT_TRUE(x);
  EXPECT_FALSE(exec_->Alive(ref));
  EXPECT_EQ(x->signal, SIGKILL) << x->ToJson().dump();
}

TEST_P(ExecutorSuite, SignalAndKillAfterExitAreOk) {
  auto r = Request("done", {"true"});
  TaskRef ref = StartOrDie(r);
  ASSERT_TRUE(WaitExit(r.task_id));
  EXPECT_FALSE(exec_->Alive(ref));
  EXPECT_TRUE(exec_->Signal(ref, SIGTERM).ok());
  EXPECT_TRUE(exec_->Kill(ref).ok());
}

TEST_P(ExecutorSuite, TaskRefRoundTripsThroughJson) {
  auto r = Request("json", {"sleep", "30"});
  TaskRef ref = StartOrDie(r);
  auto back = TaskRef::FromJson(nlohmann::json::parse(ref.ToJson().dump()));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->backend, exec_->kind());
  EXPECT_EQ(back->task_id, r.task_id);
  EXPECT_EQ(back->data, ref.data);
  EXPECT_TRUE(exec_->Alive(*back));
  EXPECT_TRUE(exec_->Kill(*back).ok());
  ASSERT_TRUE(WaitExit(r.task_id));
}

TEST_P(ExecutorSuite, MalformedRefIsAnError) {
  TaskRef bad;
  bad.backend = std::string(exec_->kind());
  bad.task_id = "suite.bad";
  bad.data = {{"pid", "not a number"}};
  EXPECT_FALSE(exec_->Reattach(bad).ok());
  EXPECT_FALSE(exec_->Kill(bad).ok());
  EXPECT_FALSE(exec_->Alive(bad));
}

TEST_P(ExecutorSuite, ReattachAfterRestartSeesTheExitCode) {
  auto r = Request("reattach", {"sh", "-c", "sleep 0.5; exit 5"});
  TaskRef ref = StartOrDie(r);
  std::string journaled = ref.ToJson().dump();
  Restart();  // the old executor stops supervising; the task keeps running
  auto back = TaskRef::FromJson(nlohmann::json::parse(journaled));
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(exec_->Alive(*back));
  ASSERT_TRUE(exec_->Reattach(*back).ok());
  auto x = WaitExit(r.task_id);
  ASSERT_TRUE(x);
  EXPECT_TRUE(x->status_known);
  EXPECT_EQ(x->exit_code, 5);
}

TEST_P(ExecutorSuite, ReattachAfterTheTaskEndedUnwatchedReadsItsRecord) {
  auto r = Request("unwatched", {"sh", "-c", "exit 4"});
  TaskRef ref = StartOrDie(r);
  Restart();
  ASSERT_TRUE(WaitUntil([&] { return !exec_->Alive(ref); }));
  ASSERT_TRUE(exec_->Reattach(ref).ok());
  auto x = WaitExit(r.task_id);
  ASSERT_TRUE(x);
  EXPECT_TRUE(x->status_known) << x->ToJson().dump();
  EXPECT_EQ(x->exit_code, 4);
}

TEST_P(ExecutorSuite, ManyTasksEachReportedOnce) {
  std::vector<std::string> ids;
  for (int i = 0; i < 50; ++i) {
    auto r = Request("many", {"sh", "-c", "exit " + std::to_string(i % 3)});
    StartOrDie(r);
    ids.push_back(r.task_id);
  }
  ASSERT_TRUE(WaitUntil([&] { return exits_.size() == ids.size(); }));
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(exits_[ids[i]].exit_code, static_cast<int>(i % 3)) << ids[i] << ": " << exits_[ids[i]].ToJson().dump();
  }
}

}  // namespace tandem::backends::testing
