// Slurm-specific behaviour of the Slurm backend (slurm_executor.h) on the real
// test cluster: GRES ownership and CUDA_VISIBLE_DEVICES per step, identical
// devices for colocated roles and disjoint slices for replicas, environment
// overrides reaching every role, cancel leaving nothing, Signal/Kill not
// blocking the caller, a time limit recorded with Slurm's reason, and what
// Slurm says about the allocation.
#include <gtest/gtest.h>
#include <signal.h>

#include <map>
#include <sstream>

#include "backends/slurm/allocation.h"
#include "backends/slurm/tests/slurm_test_cluster.h"
#include "backends/tests/executor_test_fixture.h"

namespace tandem::backends::testing {
namespace {

class SlurmExecutorTest : public ExecutorTestBase, public ::testing::Test {
 protected:
  void SetUp() override {
    TANDEM_REQUIRE_SLURM();
    Init(SlurmHarness());
  }

  // KEY=VALUE lines of a task that ran `env`.
  std::map<std::string, std::string> EnvOf(const LaunchRequest& r) {
    std::map<std::string, std::string> out;
    std::stringstream ss(ReadWholeFile(r.stdout_path));
    std::string line;
    while (std::getline(ss, line)) {
      auto eq = line.find('=');
      if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
    }
    return out;
  }

  // A task of `role` on `devices` that prints its environment after `hold`
  // seconds (so that tasks started together run at the same time).
  LaunchRequest RoleTask(const std::string& role, std::vector<int> devices, TaskEnvInput in,
                         const std::string& hold = "1") {
    in.role = role;
    in.logical_devices = devices;
    in.physical_devices = devices;
    return Request(role, {"sh", "-c", "sleep " + hold + "; env"}, in);
  }
};

TEST_F(SlurmExecutorTest, ColocatedRolesShareDevicesOnlyTheOwnerRequestsGres) {
  TaskEnvInput actor_in, rollout_in, teacher_in;
  actor_in.job_env = rollout_in.job_env = teacher_in.job_env = {{"JOB_LAYER", "job"}, {"SHARED", "job"}};
  actor_in.role_env = {{"SHARED", "actor"}, {"PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"}};
  rollout_in.role_env = {{"SHARED", "rollout"}};
  rollout_in.task_overrides = {{"ROLLOUT_ONLY", "1"}};
  teacher_in.replica_env = {{"SHARED", "teacher-replica"}};
  auto actor = RoleTask("actor", {0, 1}, actor_in);
  auto rollout = RoleTask("rollout", {0, 1}, rollout_in);
  auto teacher = RoleTask("teacher", {0, 1}, teacher_in);
  TaskRef a = StartOrDie(actor);
  TaskRef r = StartOrDie(rollout);
  TaskRef t = StartOrDie(teacher);
  EXPECT_EQ(a.data["gres_devices"], nlohmann::json({0, 1})) << "the owner requests the GPUs";
  EXPECT_TRUE(r.data["gres_devices"].empty()) << "a colocated step never requests GRES again";
  EXPECT_TRUE(t.data["gres_devices"].empty());
  for (auto* req : {&actor, &rollout, &teacher}) {
    auto x = WaitExit(req->task_id, std::chrono::seconds(60));
    ASSERT_TRUE(x) << req->task_id;
    EXPECT_TRUE(x->succeeded()) << x->ToJson().dump() << ReadWholeFile(req->stderr_path);
  }
  auto ea = EnvOf(actor), er = EnvOf(rollout), et = EnvOf(teacher);
  for (auto* e : {&ea, &er, &et}) {
    EXPECT_EQ((*e)["CUDA_VISIBLE_DEVICES"], "0,1");
    EXPECT_EQ((*e)["TANDEM_DEVICES"], "0,1");
    EXPECT_EQ((*e)["JOB_LAYER"], "job");
    EXPECT_EQ((*e)["TANDEM_JOB_ID"], "suite");
    EXPECT_FALSE((*e)["SLURM_JOB_ID"].empty()) << "runs as a step of the allocation";
  }
  EXPECT_EQ(ea["SHARED"], "actor");
  EXPECT_EQ(ea["PYTORCH_CUDA_ALLOC_CONF"], "expandable_segments:True");
  EXPECT_EQ(er["SHARED"], "rollout");
  EXPECT_EQ(er["ROLLOUT_ONLY"], "1");
  EXPECT_EQ(et["SHARED"], "teacher-replica");
  EXPECT_EQ(er.count("PYTORCH_CUDA_ALLOC_CONF"), 0u) << "no inheritance from the owner";
  EXPECT_EQ(ea["TANDEM_ROLE"], "actor");
  EXPECT_EQ(er["TANDEM_ROLE"], "rollout");
  EXPECT_EQ(et["TANDEM_ROLE"], "teacher");
  // Slurm allocated GRES to the owner's step only.
  EXPECT_FALSE(ea["SLURM_STEP_GPUS"].empty() && ea["SLURM_JOB_GPUS"].empty());
  EXPECT_NE(ea["SLURM_STEP_ID"], er["SLURM_STEP_ID"]);
}

TEST_F(SlurmExecutorTest, ReplicasGetDisjointSlicesAndCpuTasksNoGpu) {
  auto r0 = RoleTask("rollout", {0, 1}, {});
  auto r1 = RoleTask("rollout", {2, 3}, {});
  auto cpu = RoleTask("reward", {}, {});
  TaskRef a = StartOrDie(r0);
  TaskRef b = StartOrDie(r1);
  TaskRef c = StartOrDie(cpu);
  EXPECT_EQ(a.data["gres_devices"], nlohmann::json({0, 1}));
  EXPECT_EQ(b.data["gres_devices"], nlohmann::json({2, 3})) << "a disjoint slice has its own owner";
  EXPECT_TRUE(c.data["gres_devices"].empty());
  for (auto* req : {&r0, &r1, &cpu}) {
    auto x = WaitExit(req->task_id, std::chrono::seconds(60));
    ASSERT_TRUE(x);
    EXPECT_TRUE(x->succeeded()) << x->ToJson().dump() << ReadWholeFile(req->stderr_path);
  }
  EXPECT_EQ(EnvOf(r0)["CUDA_VISIBLE_DEVICES"], "0,1");
  EXPECT_EQ(EnvOf(r1)["CUDA_VISIBLE_DEVICES"], "2,3");
  auto ec = EnvOf(cpu);
  ASSERT_TRUE(ec.count("CUDA_VISIBLE_DEVICES"));
  EXPECT_EQ(ec["CUDA_VISIBLE_DEVICES"], "") << "a CPU-only step sees no GPU";
}

TEST_F(SlurmExecutorTest, KillLeavesNoStepAndNoProcess) {
  auto r = Request("cancel", {"sh", "-c", "echo $$; sleep 300 & wait"});
  TaskRef ref = StartOrDie(r);
  ASSERT_TRUE(WaitUntil([&] { return !ReadWholeFile(r.stdout_path).empty(); }, std::chrono::seconds(30)));
  pid_t pid = std::stoi(ReadWholeFile(r.stdout_path));
  ASSERT_EQ(::kill(pid, 0), 0) << "the step's shell runs on this (the only) node";
  const auto t0 = std::chrono::steady_clock::now();
  auto st = exec_->Kill(ref);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(20))
      << "Kill must not wait for squeue/scancel on the io thread";
  auto x = WaitExit(r.task_id);
  ASSERT_TRUE(x);
  EXPECT_EQ(x->signal, SIGKILL);
  EXPECT_FALSE(exec_->Alive(ref));
  ASSERT_TRUE(WaitUntil([&] {
    auto s = slurm::RunCommand({"squeue", "--noheader", "--steps",
                                "--jobs=" + ref.data["job_id"].get<std::string>(), "--format=%j"});
    return s.ok() && s->out.find(ref.data["step_name"].get<std::string>()) == std::string::npos;
  }, std::chrono::seconds(10)));
  auto steps = slurm::RunCommand({"squeue", "--noheader", "--steps",
                                  "--jobs=" + ref.data["job_id"].get<std::string>(), "--format=%j"});
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(steps->out.find(ref.data["step_name"].get<std::string>()), std::string::npos) << steps->out;
  EXPECT_TRUE(WaitUntil([&] { return ::kill(pid, 0) != 0; }, std::chrono::seconds(10)))
      << "pid " << pid << " survived the cancel";
}

TEST_F(SlurmExecutorTest, SignalReturnsAtOnceAndReachesTheStep) {
  auto r = Request("trap-fast", {"bash", "-c",
                                 "trap 'echo got-term; exit 3' TERM; echo ready; "
                                 "while true; do sleep 0.05; done"});
  TaskRef ref = StartOrDie(r);
  ASSERT_TRUE(WaitUntil([&] { return FileContains(r.stdout_path, "ready"); }, std::chrono::seconds(30)));
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(exec_->Signal(ref, SIGTERM).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(20))
      << "Signal must not wait for squeue/scancel on the io thread";
  auto x = WaitExit(r.task_id, std::chrono::seconds(30));
  ASSERT_TRUE(x);
  EXPECT_EQ(x->exit_code, 3) << x->ToJson().dump();
  EXPECT_TRUE(FileContains(r.stdout_path, "got-term"));
}

// A step over its time limit (srun --time=1, checked by slurmctld about
// every 30 s, so this takes 60 to 100 s) is ended by Slurm, and the task's
// exit says so in Slurm's words.
TEST_F(SlurmExecutorTest, StepOverItsTimeLimitFailsWithSlurmsReason) {
  SlurmExecutorOptions o;
  o.job_id = SlurmCluster::Get().job_id();
  o.exec_shim = ShimPath();
  o.srun_args = {"--time=1"};
  auto ex = SlurmExecutor::Create(*io_, Recorder(), o);
  ASSERT_TRUE(ex.ok()) << ex.status().ToString();
  auto r = Request("overtime", {"sleep", "300"});
  ASSERT_TRUE((*ex)->Start(r).ok());
  auto x = WaitExit(r.task_id, std::chrono::seconds(150));
  ASSERT_TRUE(x);
  EXPECT_FALSE(x->succeeded());
  EXPECT_NE(x->detail.find("DUE TO TIME LIMIT"), std::string::npos) << x->ToJson().dump();
}

TEST_F(SlurmExecutorTest, AllocationQueriedFromTheController) {
  auto a = slurm::QueryAllocation(SlurmCluster::Get().job_id());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->gpus, (std::vector<int>{0, 1, 2, 3}));
  const char* node = std::getenv("TANDEM_SLURM_NODE");
  if (node) {
    EXPECT_EQ(a->nodes, (std::vector<std::string>{node}));
  }
}

// A step inside an allocation that runs in a reservation (CPU only: the
// shared allocation holds every GPU).
TEST_F(SlurmExecutorTest, StepsRunInAReservedAllocation) {
  const char* node = std::getenv("TANDEM_SLURM_NODE");
  ASSERT_TRUE(node) << "TANDEM_SLURM_NODE unset";
  const std::string res = "tandem-test-res-" + std::to_string(::getpid());
  auto mk = slurm::RunCommand({"scontrol", "create", "reservation", "ReservationName=" + res,
                               "StartTime=now", "Duration=5", "Users=root",
                               std::string("Nodes=") + node, "Flags=IGNORE_JOBS"});
  ASSERT_TRUE(mk.ok() && mk->ok()) << (mk.ok() ? mk->err : mk.status().ToString());
  std::string why;
  std::string job = SubmitHoldingJob({"--reservation=" + res, "--ntasks=1"}, &why);
  if (!job.empty()) {
    auto q = slurm::QueryAllocation(job);
    auto show = slurm::RunCommand({"scontrol", "show", "job", job});
    EXPECT_EQ(slurm::ScontrolField(show.ok() ? show->out : "", "Reservation"), res);
    SlurmExecutorOptions o;
    o.job_id = job;
    o.exec_shim = ShimPath();
    auto ex = SlurmExecutor::Create(*io_, Recorder(), o);
    ASSERT_TRUE(ex.ok()) << ex.status().ToString();
    ASSERT_TRUE(q.ok());
    auto r = RoleTask("reserved", q->gpus, {}, "0");
    ASSERT_TRUE((*ex)->Start(r).ok());
    auto x = WaitExit(r.task_id, std::chrono::seconds(60));
    ASSERT_TRUE(x);
    EXPECT_TRUE(x->succeeded()) << x->ToJson().dump() << ReadWholeFile(r.stderr_path);
    EXPECT_EQ(EnvOf(r)["SLURM_JOB_ID"], job);
    (void)slurm::RunCommand({"scancel", job});
  }
  // A reservation cannot be deleted while its job is still ending.
  for (int i = 0; i < 100; ++i) {
    auto del = slurm::RunCommand({"scontrol", "delete", "ReservationName=" + res});
    if (del.ok() && del->ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_FALSE(job.empty()) << why;
}

}  // namespace
}  // namespace tandem::backends::testing
