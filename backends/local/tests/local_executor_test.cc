// Local-backend behaviour beyond the shared suite, with real processes:
// environment layering end to end, 200 concurrent tasks on leased ports,
// killing a tree with an escaped (setsid, double-forked) grandchild, orphan
// reaping as child subreaper (and beside another executor), pid-reuse
// detection on re-attach, the exit record, a pidfd wakeup that is not an
// exit, no fd leaks over 1000 tasks, and the shim removing its task's
// shared-memory weight segments when the command dies.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <boost/asio/posix/stream_descriptor.hpp>

#include "backends/local/local_executor.h"
#include "backends/local/proc_table.h"
#include "backends/local/tests/local_test_util.h"
#include "backends/port_lease.h"

namespace tandem::backends::testing {
namespace {

class LocalExecutorTest : public ExecutorTestBase, public ::testing::Test {
 protected:
  void SetUp() override { Init(LocalHarness()); }
  void TearDown() override {
    if (exec_) ExpectExactlyOnce();
  }
  LocalExecutor& local() { return *static_cast<LocalExecutor*>(exec_.get()); }
  static std::string Marker(const TaskRef& ref) {
    return "TANDEM_TASK_MARK=" + ref.data["marker"].get<std::string>();
  }
};

std::map<std::string, std::string> ParseEnvOutput(const std::string& out) {
  std::map<std::string, std::string> env;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    auto eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

size_t OpenFdCount() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// tandem-exec, run as any backend runs it, around a command that leaves a
// weight segment and is SIGKILLed: the task's segments are gone
// (tandem-<job>-<task>-v<digits>, the ids' bytes outside [A-Za-z0-9._] as
// '_'), nobody else's, and nothing that only looks like one.
TEST(ExecShim, RemovesItsTasksWeightSegmentsWhenTheCommandDies) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("tandem_shim_shm_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string mine = "tandem-j_1-actor_0-v";
  const std::vector<std::string> gone = {mine + "3", mine + "12"};
  const std::vector<std::string> kept = {mine + "3x", mine, "tandem-j_1-actor_1-v3", "tandem-j_2-actor_0-v3",
                                         "tandem-j_1-actor_0-v3.tmp"};
  for (const std::vector<std::string>* names : {&gone, &kept})
    for (const std::string& n : *names) std::ofstream(dir / n) << "x";
  const std::string cmd = "env TANDEM_JOB_ID='j/1' TANDEM_TASK_ID='actor 0' '" + ShimPath().string() + "' --shm-dir '" +
                          dir.string() + "' -- sh -c 'echo x > \"$0/" + mine + "7\"; kill -KILL $$' '" + dir.string() + "'";
  const int rc = std::system(cmd.c_str());
  EXPECT_TRUE(WIFSIGNALED(rc) || (WIFEXITED(rc) && WEXITSTATUS(rc) == 128 + SIGKILL)) << "status " << rc;
  EXPECT_FALSE(std::filesystem::exists(dir / (mine + "7"))) << "the segment the command made";
  for (const std::string& n : gone) EXPECT_FALSE(std::filesystem::exists(dir / n)) << n;
  for (const std::string& n : kept) EXPECT_TRUE(std::filesystem::exists(dir / n)) << n;
  std::filesystem::remove_all(dir);
}

TEST(LocalExecutorCreate, FailsWithoutTheShim) {
  boost::asio::io_context io;
  LocalExecutorOptions o;
  o.exec_shim = "/nonexistent/tandem-exec";
  auto e = LocalExecutor::Create(io, [](const std::string&, const TaskExit&) {}, o);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("/nonexistent/tandem-exec"), std::string::npos);
}

TEST_F(LocalExecutorTest, StartFailsCleanlyWhenTheCwdIsMissing) {
  auto r = Request("nocwd", {"true"});
  r.cwd = dir_.path() / "missing";
  auto ref = exec_->Start(r);
  ASSERT_FALSE(ref.ok());
  EXPECT_NE(ref.status().message().find("missing"), std::string::npos) << ref.status().ToString();
  EXPECT_EQ(local().supervised_count(), 0u);
}

TEST_F(LocalExecutorTest, EnvironmentIsLayeredInTheDocumentedOrder) {
  ::setenv("TANDEM_LEAK_CHECK", "daemon-only", 1);
  TaskEnvInput in;
  in.job_env = {{"A", "job"}, {"B", "job"}, {"C", "job"}, {"D", "job"}, {"TANDEM_RANK", "999"}};
  in.role_env = {{"B", "role"}, {"C", "role"}, {"D", "role"}};
  in.replica_env = {{"C", "replica"}, {"D", "replica"}};
  in.task_overrides = {{"D", "task"}};
  in.rank = 2;
  in.world_size = 3;
  in.ports = {20001, 20002};
  in.control = "unix:/tmp/ctl.sock";
  auto r = Request("envorder", {"env"}, in);
  ::unsetenv("TANDEM_LEAK_CHECK");
  TaskRef ref = StartOrDie(r);
  ASSERT_TRUE(WaitExit(r.task_id));
  auto env = ParseEnvOutput(ReadWholeFile(r.stdout_path));

  EXPECT_EQ(env["A"], "job");
  EXPECT_EQ(env["B"], "role");
  EXPECT_EQ(env["C"], "replica");
  EXPECT_EQ(env["D"], "task");
  EXPECT_EQ(env["TANDEM_RANK"], "2");  // tandem's variables win
  EXPECT_EQ(env["TANDEM_WORLD_SIZE"], "3");
  EXPECT_EQ(env["TANDEM_PORTS"], "20001,20002");
  EXPECT_EQ(env["TANDEM_TASK_ID"], r.task_id);
  EXPECT_EQ(env["TANDEM_CONTROL"], "unix:/tmp/ctl.sock");
  ASSERT_TRUE(env.count("CUDA_VISIBLE_DEVICES"));
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "");  // CPU-only: sees no GPU
  EXPECT_EQ(Marker(ref), "TANDEM_TASK_MARK=" + env["TANDEM_TASK_MARK"]);

  std::set<std::string> allowed = {"A", "B", "C", "D", "TANDEM_TASK_MARK", "CUDA_VISIBLE_DEVICES",
                                   "TANDEM_CONTROL"};
  for (auto k : BaseEnvironmentAllowList()) allowed.insert(std::string(k));
  for (const auto& [k, v] : env)
    EXPECT_TRUE(allowed.count(k) || k.rfind("TANDEM_", 0) == 0) << "leaked: " << k;
  EXPECT_FALSE(env.count("TANDEM_LEAK_CHECK"));
  EXPECT_FALSE(env["PATH"].empty());
}

TEST_F(LocalExecutorTest, TwoHundredConcurrentTasksGetDistinctBindablePorts) {
  auto reg = PortLeaseRegistry::Create();
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  const auto release = dir_.path() / "release";
  std::vector<LaunchRequest> reqs;
  for (int i = 0; i < 200; ++i) {
    TaskEnvInput in;
    in.rank = i;
    in.world_size = 200;
    std::string owner = "ports." + std::to_string(i);
    auto ports = reg->Lease(owner, 2);
    ASSERT_TRUE(ports.ok()) << ports.status().ToString();
    in.ports = *ports;
    auto r = Request("ports", {HelperPath(), "hold-ports", release.string()}, in);
    StartOrDie(r);
    reqs.push_back(r);
  }
  // Every task holds its ports at the same time before any is released.
  size_t ready = 0;
  ASSERT_TRUE(WaitUntil([&] {
    while (ready < reqs.size() && FileContains(reqs[ready].stdout_path, "ready")) ++ready;
    return ready == reqs.size();
  }, std::chrono::seconds(60))) << ready << " of 200 ready";
  EXPECT_TRUE(exits_.empty());
  std::ofstream(release) << "go\n";
  ASSERT_TRUE(WaitUntil([&] { return exits_.size() == reqs.size(); }, std::chrono::seconds(60)));

  std::set<int> seen;
  for (size_t i = 0; i < reqs.size(); ++i) {
    std::string out = ReadWholeFile(reqs[i].stdout_path);
    EXPECT_EQ(out.find("bind-failed"), std::string::npos) << out;
    EXPECT_EQ(exits_[reqs[i].task_id].exit_code, 0) << out;
    for (int p : reg->PortsOf("ports." + std::to_string(i))) {
      EXPECT_TRUE(seen.insert(p).second) << "port " << p << " leased twice";
      EXPECT_NE(out.find("bound " + std::to_string(p) + "\n"), std::string::npos) << out;
    }
    reg->Release("ports." + std::to_string(i));
  }
  EXPECT_EQ(seen.size(), 400u);
  EXPECT_EQ(reg->leased_count(), 0u);
}

TEST_F(LocalExecutorTest, KillLeavesNoDescendantIncludingADoubleForkedOne) {
  auto r = Request("tree", {HelperPath(), "escape", "60"});
  TaskRef ref = StartOrDie(r);
  ASSERT_TRUE(WaitUntil([&] { return FileContains(r.stdout_path, "grandchild "); }));
  pid_t gc = std::stoi(ReadWholeFile(r.stdout_path).substr(std::string("grandchild ").size()));
  auto gst = local::ReadProcStat(gc);
  ASSERT_TRUE(gst && !gst->dead());
  const pid_t shim = ref.data["pid"].get<pid_t>();
  EXPECT_NE(gst->sid, shim) << "the grandchild left the task's session";
  EXPECT_GE(local::FindProcessesWithEnv(Marker(ref)).size(), 3u);  // shim, helper, gc

  auto st = exec_->Kill(ref);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(local::FindProcessesWithEnv(Marker(ref)).empty());
  auto after = local::ReadProcStat(gc);
  EXPECT_TRUE(!after || after->dead()) << "grandchild " << gc << " survived";
  auto x = WaitExit(r.task_id);
  ASSERT_TRUE(x);
  EXPECT_EQ(x->signal, SIGKILL);
}

TEST_F(LocalExecutorTest, SignalReachesADoubleForkedDescendant) {
  auto r = Request("sigtree", {HelperPath(), "escape", "60"});
  TaskRef ref = StartOrDie(r);
  ASSERT_TRUE(WaitUntil([&] { return FileContains(r.stdout_path, "grandchild "); }));
  pid_t gc = std::stoi(ReadWholeFile(r.stdout_path).substr(std::string("grandchild ").size()));
  ASSERT_TRUE(exec_->Signal(ref, SIGTERM).ok());
  ASSERT_TRUE(WaitUntil([&] {
    auto s = local::ReadProcStat(gc);
    return !s || s->dead();
  }));
  auto x = WaitExit(r.task_id);
  ASSERT_TRUE(x);
  EXPECT_EQ(x->signal, SIGTERM);
}

TEST_F(LocalExecutorTest, KillRightAfterStartLeavesNothing) {
  auto r = Request("early", {"sleep", "30"});
  TaskRef ref = StartOrDie(r);
  auto st = exec_->Kill(ref);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(local::FindProcessesWithEnv(Marker(ref)).empty());
  auto x = WaitExit(r.task_id);
  ASSERT_TRUE(x);
  EXPECT_EQ(x->signal, SIGKILL) << x->ToJson().dump();
}

TEST_F(LocalExecutorTest, TermSentToTheShimPidIsForwardedToTheCommand) {
  auto r = Request("fwd", {"bash", "-c",
                           "trap 'echo got-term; exit 0' TERM; echo ready; "
                           "while true; do sleep 0.05; done"});
  TaskRef ref = StartOrDie(r);
  ASSERT_TRUE(WaitUntil([&] { return FileContains(r.stdout_path, "ready"); }));
  ::kill(ref.data["pid"].get<pid_t>(), SIGTERM);  // what `kill <pid>` by a user does
  auto x = WaitExit(r.task_id);
  ASSERT_TRUE(x);
  EXPECT_TRUE(x->succeeded()) << x->ToJson().dump();
  EXPECT_TRUE(FileContains(r.stdout_path, "got-term"));
}

TEST_F(LocalExecutorTest, ExitRecordIsWrittenAtomically) {
  auto r = Request("record", {"sh", "-c", "exit 3"});
  TaskRef ref = StartOrDie(r);
  ASSERT_TRUE(WaitExit(r.task_id));
  auto j = nlohmann::json::parse(ReadWholeFile(r.exit_path));
  EXPECT_EQ(j["marker"], ref.data["marker"]);
  EXPECT_EQ(j["exit_code"], 3);
  EXPECT_EQ(j["signal"], 0);
  auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_NEAR(static_cast<double>(j["ended_at_ms"].get<int64_t>()), static_cast<double>(now_ms), 60000);
  EXPECT_FALSE(std::filesystem::exists(r.exit_path.string() + ".tmp"));
}

TEST_F(LocalExecutorTest, ReattachWithAWrongStartTimeIsReportedGone) {
  auto r = Request("reuse", {"sleep", "30"});
  TaskRef ref = StartOrDie(r);
  TaskRef wrong = ref;
  wrong.task_id = r.task_id + ".wrong";
  wrong.data["start_time"] = ref.data["start_time"].get<uint64_t>() + 1;
  TaskRef other_boot = ref;
  other_boot.task_id = r.task_id + ".boot";
  other_boot.data["boot_id"] = "00000000-0000-0000-0000-000000000000";
  Restart();
  // A record left by an earlier run at the same path is not this task's.
  std::ofstream(r.exit_path) << R"({"exit_code":0,"signal":0,"ended_at_ms":1,"marker":"0123456789abcdef0123456789abcdef"})";

  EXPECT_FALSE(exec_->Alive(wrong));
  EXPECT_FALSE(exec_->Alive(other_boot));
  ASSERT_TRUE(exec_->Reattach(wrong).ok());
  ASSERT_TRUE(exec_->Reattach(other_boot).ok());
  for (const auto& id : {wrong.task_id, other_boot.task_id}) {
    auto x = WaitExit(id);
    ASSERT_TRUE(x);
    EXPECT_FALSE(x->status_known);
    EXPECT_NE(x->detail.find("no exit record"), std::string::npos) << x->detail;
  }
  EXPECT_TRUE(exec_->Alive(ref)) << "the real task was not touched";
  ASSERT_TRUE(exec_->Reattach(ref).ok());
  ASSERT_TRUE(exec_->Reattach(ref).ok()) << "idempotent";
  TaskRef twin = ref;
  twin.task_id = r.task_id + ".twin";
  EXPECT_EQ(exec_->Reattach(twin).code(), StatusCode::kAlreadyExists);
  ASSERT_TRUE(exec_->Kill(ref).ok());
  auto x = WaitExit(r.task_id);
  ASSERT_TRUE(x);
  EXPECT_EQ(x->signal, SIGKILL);
}

// Starts the shim the way an earlier daemon would have, but from a shell that
// exits at once, so the task is not our child (as after a real restart), and
// returns the TaskRef that daemon would have journaled.
TaskRef StartForeignTask(const std::filesystem::path& dir, const std::string& name,
                         const std::string& script) {
  const std::string marker = "f0f0f0f0f0f0f0f0" + std::to_string(::getpid()) + name;
  const auto exit_path = dir / (name + ".exit.json");
  const auto pid_file = dir / (name + ".pid");
  const auto launcher = dir / (name + ".launch.sh");
  std::ofstream(launcher) << "env -i PATH=/usr/bin:/bin TANDEM_TASK_MARK=" << marker << " '"
                          << ShimPath().string() << "' --exit-path '" << exit_path.string()
                          << "' -- sh -c '" << script << "' </dev/null >/dev/null 2>&1 &\n"
                          << "echo $! > '" << pid_file.string() << "'\n";
  EXPECT_EQ(std::system(("sh " + launcher.string()).c_str()), 0);
  TaskRef ref;
  ref.backend = "local";
  ref.task_id = "foreign." + name;
  pid_t pid = std::stoi(ReadWholeFile(pid_file));
  auto st = local::ReadProcStat(pid);
  EXPECT_TRUE(st.has_value());
  ref.data = {{"pid", pid}, {"pgid", pid}, {"sid", pid},
              {"start_time", st ? st->start_time : 0}, {"boot_id", *local::ReadBootId()},
              {"marker", marker}, {"exit_path", exit_path.string()}};
  return ref;
}

TEST_F(LocalExecutorTest, ReattachToATaskThatIsNotOurChildReadsTheExitRecord) {
  TaskRef ref = StartForeignTask(dir_.path(), "notchild", "sleep 0.3; exit 6");
  ASSERT_TRUE(exec_->Alive(ref));
  ASSERT_TRUE(exec_->Reattach(ref).ok());
  auto x = WaitExit(ref.task_id);
  ASSERT_TRUE(x);
  EXPECT_TRUE(x->status_known) << x->ToJson().dump();
  EXPECT_EQ(x->exit_code, 6);
}

TEST_F(LocalExecutorTest, ReattachedTaskKilledWithoutARecordIsStatusUnknown) {
  TaskRef ref = StartForeignTask(dir_.path(), "norecord", "sleep 30");
  ASSERT_TRUE(exec_->Reattach(ref).ok());
  ::kill(ref.data["pid"].get<pid_t>(), SIGKILL);  // the shim dies before writing anything
  auto x = WaitExit(ref.task_id);
  ASSERT_TRUE(x);
  EXPECT_FALSE(x->status_known) << x->ToJson().dump();
  EXPECT_NE(x->detail.find("no exit record"), std::string::npos);
  EXPECT_TRUE(exec_->Kill(ref).ok());  // the orphaned sleep carries the marker
  EXPECT_TRUE(local::FindProcessesWithEnv(Marker(ref)).empty());
}

// A task may leave anything at its exit record's path (common/task_file.h):
// a FIFO (the old executor's open() waited on it forever, and the daemon's io
// thread with it) or a symlink to /dev/zero (read forever). Either is no
// record: the task ended with status unknown, at once.
TEST_F(LocalExecutorTest, AnExitRecordPathTheTaskTurnedIntoAFifoOrSymlinkIsNoRecord) {
  for (const std::string kind : {"fifo", "zero"}) {
    SCOPED_TRACE(kind);
    TaskRef ref = StartForeignTask(dir_.path(), "hostile" + kind, "sleep 30");
    const std::string exit_path = ref.data["exit_path"].get<std::string>();
    if (kind == "fifo") ASSERT_EQ(::mkfifo(exit_path.c_str(), 0600), 0);
    else std::filesystem::create_symlink("/dev/zero", exit_path);
    ASSERT_TRUE(exec_->Reattach(ref).ok());
    ::kill(ref.data["pid"].get<pid_t>(), SIGKILL);  // the shim dies before writing its record
    auto x = WaitExit(ref.task_id);
    ASSERT_TRUE(x) << "the executor hung on the exit path";
    EXPECT_FALSE(x->status_known) << x->ToJson().dump();
    EXPECT_NE(x->detail.find("no exit record"), std::string::npos) << x->detail;
    EXPECT_TRUE(exec_->Kill(ref).ok());
  }
}

TEST_F(LocalExecutorTest, SubreaperReapsOrphanedDescendants) {
  ASSERT_TRUE(EnableChildSubreaper().ok());
  struct Off {
    ~Off() { ::prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0); }
  } off;
  LocalExecutorOptions o;
  o.reap_orphans = true;
  harness_ = LocalHarness(o);
  Restart();
  auto r = Request("orphan", {HelperPath(), "escape", "0"});
  StartOrDie(r);
  ASSERT_TRUE(WaitExit(r.task_id));
  ASSERT_TRUE(WaitUntil([&] { return FileContains(r.stdout_path, "grandchild "); }));
  pid_t gc = std::stoi(ReadWholeFile(r.stdout_path).substr(std::string("grandchild ").size()));
  // The grandchild was reparented to us and must not linger as a zombie.
  EXPECT_TRUE(WaitUntil([&] { return !local::ReadProcStat(gc); })) << "zombie " << gc;
}

// The daemon holds two executors: its own, which reaps orphans, and the Slurm
// backend's for its srun clients. The reaper must leave the other's tasks to
// it, or the exits of shims that die without a record are lost ("ended
// unsupervised"). Each round SIGKILLs the other's shim and has the reaper look
// for orphans while the shim is a zombie whose pidfd has not been handled
// yet: a reaper created then looks at once.
TEST_F(LocalExecutorTest, TheOrphanReaperLeavesAnotherExecutorsTasksAlone) {
  LocalExecutorOptions o;
  o.reap_orphans = true;
  harness_ = LocalHarness(o);
  Restart();
  std::map<std::string, TaskExit> other_exits;
  LocalExecutorOptions other_options;
  other_options.exec_shim = ShimPath();
  other_options.cgroup_name = "tandem-other-" + std::to_string(::getpid());
  auto other = LocalExecutor::Create(
      *io_, [&](const std::string& id, const TaskExit& x) { other_exits[id] = x; }, other_options);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  auto ended = [](const TaskRef& ref) {  // without running the io loop
    for (int i = 0; i < 4000; ++i) {
      auto st = local::ReadProcStat(ref.data["pid"].get<pid_t>());
      if (!st || st->dead()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  };
  for (int i = 0; i < 5; ++i) {
    auto r = Request("other", {"sleep", "2"});  // outlives its shim briefly where no cgroup drains it
    auto ref = (*other)->Start(r);
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    ::kill(ref->data["pid"].get<pid_t>(), SIGKILL);
    ASSERT_TRUE(ended(*ref)) << i;
    exec_.reset();  // a new reaper on the same io_context
    auto made = harness_.make(*io_, Recorder());
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    exec_ = std::move(made).value();
    ASSERT_TRUE(WaitUntil([&] { return other_exits.count(r.task_id) > 0; })) << i;
    const TaskExit& x = other_exits[r.task_id];
    EXPECT_TRUE(x.status_known) << i << " " << x.ToJson().dump();
    EXPECT_EQ(x.signal, SIGKILL) << i << " " << x.ToJson().dump();
  }
}

// asio queues the descriptors that one epoll_wait found ready, then handles
// them in turn. A handler of the first that closes the second and starts a
// task hands the second's state, events included, to the task's pidfd
// (asio's pool reuses it at once): those events must not end the task.
// The same wakeup, for a task that runs 1.5 s and one that ends while its
// executor looks again (its exit may come before the wait is armed again).
class WakeupTest : public LocalExecutorTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(WakeupTest, AWakeupThatIsNotAnExitDoesNotEndTheTask) {
  int x[2], y[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, x), 0);
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, y), 0);
  using Descriptor = boost::asio::posix::stream_descriptor;
  auto dx = std::make_unique<Descriptor>(*io_, x[0]);
  auto dy = std::make_unique<Descriptor>(*io_, y[0]);
  LaunchRequest r = Request("woken", {"sh", "-c", GetParam()});
  dx->async_wait(Descriptor::wait_read, [&](const boost::system::error_code&) {
    dy.reset();  // closes y[0]; its state goes back to asio's pool
    StartOrDie(r);
  });
  dy->async_wait(Descriptor::wait_read, [](const boost::system::error_code&) {});
  ASSERT_EQ(::write(x[1], "x", 1), 1);  // both ready before the loop runs
  ASSERT_EQ(::write(y[1], "y", 1), 1);
  auto ex = WaitExit(r.task_id);
  ASSERT_TRUE(ex);
  EXPECT_TRUE(ex->status_known) << ex->ToJson().dump();
  EXPECT_EQ(ex->exit_code, 3) << ex->ToJson().dump();
  ::close(x[1]);
  ::close(y[1]);
}

INSTANTIATE_TEST_SUITE_P(LongAndShort, WakeupTest, ::testing::Values("sleep 1.5; exit 3", "exit 3"));

TEST_F(LocalExecutorTest, AThousandSequentialTasksLeakNoFds) {
  // Warm up once so lazily opened descriptors (log sinks, epoll) are counted.
  auto w = Request("warm", {"true"});
  StartOrDie(w);
  ASSERT_TRUE(WaitExit(w.task_id));
  const size_t before = OpenFdCount();
  for (int i = 0; i < 1000; ++i) {
    auto r = Request("seq", {"true"});
    r.stdout_path.clear();
    r.stderr_path.clear();
    StartOrDie(r);
    auto x = WaitExit(r.task_id);
    ASSERT_TRUE(x) << i;
    ASSERT_TRUE(x->succeeded()) << i << " " << x->ToJson().dump();
  }
  EXPECT_EQ(OpenFdCount(), before);
  EXPECT_EQ(local().supervised_count(), 0u);
}

}  // namespace
}  // namespace tandem::backends::testing
