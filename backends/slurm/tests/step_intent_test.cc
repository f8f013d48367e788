// What a restarted daemon does with a step known only by its intent record
// (step_intent.h): the decision table, and finding/stopping an orphaned srun
// client by the step name in its command line (srun_client.h) on a real
// process.
#include "backends/slurm/step_intent.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "backends/slurm/srun_client.h"

extern char** environ;

namespace tandem::backends::slurm {
namespace {

using std::chrono::milliseconds;

IntentProbe Probe(bool client, const std::string& step = "", bool record = false, bool squeue_ok = true,
                  std::optional<std::string> srun_ended = std::nullopt) {
  IntentProbe p;
  if (client) p.clients.push_back(local::ProcStat{});
  p.step = step;
  p.exit_record = record;
  p.squeue_ok = squeue_ok;
  p.srun_ended = std::move(srun_ended);
  return p;
}

IntentClock Clock(int elapsed_ms, bool cancel = false, std::optional<int> since_term_ms = std::nullopt,
                  bool clients_seen = false) {
  IntentClock c;
  c.elapsed = milliseconds(elapsed_ms);
  c.create_wait = milliseconds(10000);
  c.term_grace = milliseconds(3000);
  if (since_term_ms) c.since_term = milliseconds(*since_term_ms);
  c.cancel = cancel;
  c.clients_seen = clients_seen;
  return c;
}

TEST(StepIntent, ALiveStepOrItsExitRecordIsAdoptedNeverStartedAgain) {
  EXPECT_EQ(DecideIntent(Probe(true, "12.0"), Clock(0)).verdict, IntentVerdict::kAdopt);
  EXPECT_EQ(DecideIntent(Probe(false, "12.0"), Clock(60000)).verdict, IntentVerdict::kAdopt);
  EXPECT_EQ(DecideIntent(Probe(false, "", true), Clock(0)).verdict, IntentVerdict::kAdopt);
  // Even after the task was killed: the adopted step is then cancelled.
  EXPECT_EQ(DecideIntent(Probe(false, "12.0"), Clock(0, true)).verdict, IntentVerdict::kAdopt);
}

TEST(StepIntent, ALivingSrunClientIsWaitedForThenStoppedNotDuplicated) {
  auto d = DecideIntent(Probe(true), Clock(500));
  EXPECT_EQ(d.verdict, IntentVerdict::kWait);
  EXPECT_EQ(d.signal_clients, 0);
  // Past the wait: SIGTERM (srun cancels what it creates), then SIGKILL after the grace.
  d = DecideIntent(Probe(true), Clock(10000));
  EXPECT_EQ(d.verdict, IntentVerdict::kWait);
  EXPECT_EQ(d.signal_clients, SIGTERM);
  d = DecideIntent(Probe(true), Clock(11000, false, 1000));
  EXPECT_EQ(d.verdict, IntentVerdict::kWait);
  EXPECT_EQ(d.signal_clients, 0);
  d = DecideIntent(Probe(true), Clock(13500, false, 3500));
  EXPECT_EQ(d.signal_clients, SIGKILL);
  // Killed task: stop the client at once.
  d = DecideIntent(Probe(true), Clock(100, true));
  EXPECT_EQ(d.verdict, IntentVerdict::kWait);
  EXPECT_EQ(d.signal_clients, SIGTERM);
  // A client still alive is never "never started", however long it takes.
  EXPECT_EQ(DecideIntent(Probe(true), Clock(600000, false, 590000)).verdict, IntentVerdict::kWait);
}

TEST(StepIntent, NeverStartedOnlyWithoutClientStepOrRecord) {
  auto d = DecideIntent(Probe(false), Clock(0));
  EXPECT_EQ(d.verdict, IntentVerdict::kNeverStarted);
  EXPECT_EQ(d.why, "no srun client, no step, no exit record");
  // The client this daemon saw (and stopped) is gone, no step appeared.
  d = DecideIntent(Probe(false, "", false, true, "signal 15"), Clock(14000, false, 4000, true));
  EXPECT_EQ(d.verdict, IntentVerdict::kNeverStarted);
  EXPECT_EQ(d.why, "its srun client ended before creating the step");
}

TEST(StepIntent, AFailingSqueueProvesNothing) {
  auto d = DecideIntent(Probe(false, "", false, false), Clock(60000));
  EXPECT_EQ(d.verdict, IntentVerdict::kWait);
  EXPECT_EQ(d.why, "squeue did not answer");
}

TEST(StepIntent, SrunEndedUnwatchedMayHaveRunAndIsNotStartedAgain) {
  auto d = DecideIntent(Probe(false, "", false, true, "code 137"), Clock(0));
  EXPECT_EQ(d.verdict, IntentVerdict::kEndedUnknown);
  EXPECT_NE(d.why.find("code 137"), std::string::npos) << d.why;
}

// A stand-in for an orphaned srun client: a real process whose command line
// names the step.
TEST(SrunClient, FoundByTheStepNameInItsCommandLineAndStopped) {
  const std::string name = "job-x.actor.0." + std::to_string(::getpid());
  const std::string arg = StepNameArg(name);
  EXPECT_TRUE(FindSrunClients(name).empty());
  std::vector<std::string> argv_s = {"sh", "-c", "sleep 30; :", "sh", arg};
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  posix_spawnattr_t attr;
  ::posix_spawnattr_init(&attr);
  ::posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);  // its own group: the sleep goes with it
  ::posix_spawnattr_setpgroup(&attr, 0);
  ASSERT_EQ(::posix_spawnp(&pid, "sh", nullptr, &attr, argv.data(), environ), 0);
  ::posix_spawnattr_destroy(&attr);
  struct Reap {
    pid_t pgid;
    ~Reap() { ::kill(-pgid, SIGKILL); }
  } reap{pid};
  // Until sh has forked its sleep and that child has exec'd: in between, the
  // forked child still carries sh's command line (and so the step's name).
  std::vector<local::ProcStat> found;
  for (int i = 0; i < 100 && found.size() != 1; ++i) {
    found = FindSrunClients(name);
    if (found.size() != 1) std::this_thread::sleep_for(milliseconds(20));
  }
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].pid, pid);
  EXPECT_TRUE(FindSrunClients(name + "0").empty()) << "a prefix of another step's name must not match";
  // A recorded start time that is not the process's (a recycled pid) is never signalled.
  auto stale = found;
  stale[0].start_time += 1;
  EXPECT_EQ(SignalProcesses(stale, SIGTERM), 0);
  EXPECT_EQ(SignalProcesses(found, SIGTERM), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
  EXPECT_TRUE(FindSrunClients(name).empty());
}

}  // namespace
}  // namespace tandem::backends::slurm
