// An outside agent program's run (agent_process.h): output, exit status,
// stdin, the deadline, an output bound, and nothing left behind.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "workers/agents/agent_process.h"

namespace tandem::agents {
namespace {

using namespace std::chrono_literals;

// Running: it exists and is not a zombie (killed orphans wait for whoever
// reaps them here).
bool Alive(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return false;
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

pid_t ReadPid(const std::string& path) {
  std::ifstream in(path);
  pid_t pid = -1;
  in >> pid;
  return pid;
}

TEST(AgentProcess, RunsWithInputEnvironmentAndOutput) {
  auto r = RunAgentProcess({"bash", "-c", "read line; echo \"got $line from $TANDEM_X\"; echo oops >&2; exit 3"},
                           {{"TANDEM_X", "env"}}, "hello\n", 10s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->out, "got hello from env\n");
  EXPECT_EQ(r->err_tail, "oops\n");
  EXPECT_EQ(r->exit_code, 3);
  auto missing = RunAgentProcess({"/no/such/agent"}, {}, "", 10s);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("cannot start"), std::string::npos) << missing.status().ToString();
  // A program that never reads its stdin does not block the writer.
  auto deaf = RunAgentProcess({"bash", "-c", "echo done"}, {}, std::string(4 << 20, 'x'), 10s);
  ASSERT_TRUE(deaf.ok()) << deaf.status().ToString();
  EXPECT_EQ(deaf->out, "done\n");
}

TEST(AgentProcess, APastDeadlineKillsTheWholeGroup) {
  char tmpl[] = "/tmp/tandem-agent-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const auto t0 = std::chrono::steady_clock::now();
  // The agent starts a child of its own and both sleep.
  auto r = RunAgentProcess({"bash", "-c", "sleep 60 & echo $! > " + dir + "/child; echo $$ > " + dir + "/agent; wait"}, {},
                           "", 500ms);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  const pid_t child = ReadPid(dir + "/child"), agent = ReadPid(dir + "/agent");
  ASSERT_GT(child, 0);
  usleep(100000);
  EXPECT_FALSE(Alive(child)) << "the agent's child was left running";
  EXPECT_FALSE(Alive(agent));
  // An agent that exits at once but leaves a child behind: the child goes too.
  auto left = RunAgentProcess({"bash", "-c", "sleep 60 >/dev/null 2>&1 </dev/null & echo $! > " + dir + "/bg; echo ok"}, {},
                              "", 10s);
  ASSERT_TRUE(left.ok()) << left.status().ToString();
  const pid_t bg = ReadPid(dir + "/bg");
  usleep(100000);
  EXPECT_FALSE(Alive(bg)) << "what the agent left in its group was not stopped";
  std::filesystem::remove_all(dir);
}

TEST(AgentProcess, OutputOverItsBoundIsRefused) {
  auto r = RunAgentProcess({"bash", "-c", "head -c 3000000 /dev/zero"}, {}, "", 10s, 1u << 20);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("over 1048576 bytes on stdout"), std::string::npos) << r.status().ToString();
}

}  // namespace
}  // namespace tandem::agents
