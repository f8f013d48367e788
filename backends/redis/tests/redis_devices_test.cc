// Per-node physical device mapping with real agents (docs/redis.md
// "Placement"; node_placement.h): two agents with different --gpus, tasks
// asking for the job's logical devices, and what each task sees in
// CUDA_VISIBLE_DEVICES. (The same through tandemd across network
// namespaces: tests/multihost.)
#include <string>

#include "backends/redis/tests/redis_test_util.h"

namespace tandem::backends::testing {
namespace {

class RedisDevicesTest : public ExecutorTestBase, public ::testing::Test {
 protected:
  void SetUp() override {
    if (!RedisReachable()) {
      if (ServicesRequired()) FAIL() << "redis is not reachable (scripts/services/redis.sh start)";
      GTEST_SKIP() << "redis is not running; scripts/services/redis.sh start";
    }
    cluster_.prefix = UniquePrefix("devices");
    // node0: four GPUs with physical ids 4..7; node1: one GPU, id 1.
    for (auto [name, gpus] : {std::pair<std::string, std::string>{"node0", "4,5,6,7"}, {"node1", "1"}}) {
      auto a = std::make_unique<AgentProcess>(name, cluster_.prefix, 2.0,
                                              (dir_.path() / (cluster_.prefix + "-" + name + ".log")).string());
      a->extra_args = {"--gpus", gpus};
      ASSERT_TRUE(a->Spawn());
      cluster_.agents.push_back(std::move(a));
    }
    ASSERT_TRUE(cluster_.WaitNodes(2).ok());
    std::string prefix = cluster_.prefix;
    Init({"redis", [prefix](boost::asio::io_context& io, Executor::ExitCallback cb)
                       -> StatusOr<std::unique_ptr<Executor>> {
            TANDEM_ASSIGN_OR_RETURN(auto e, MakeRedisExecutor(io, std::move(cb), prefix), "executor");
            return std::unique_ptr<Executor>(std::move(e));
          }});
  }

  // A task of role `role` on logical devices `logical` that prints its CUDA_VISIBLE_DEVICES.
  LaunchRequest GpuTask(const std::string& role, std::vector<int> logical) {
    TaskEnvInput in;
    in.logical_devices = logical;
    in.physical_devices = logical;  // what tandemd passes for redis jobs: the agent maps them
    return Request(role, {"sh", "-c", "echo \"CVD=$CUDA_VISIBLE_DEVICES\"; sleep 30"}, in);
  }
  std::string Cvd(const LaunchRequest& r) {
    std::string out;
    WaitUntil([&] {
      out = ReadWholeFile(r.stdout_path);
      return out.find('\n') != std::string::npos;
    }, std::chrono::seconds(10));
    return out.substr(0, out.find('\n'));
  }

  RedisCluster cluster_;
};

TEST_F(RedisDevicesTest, EachNodeMapsTheJobsGpusOntoItsOwnIds) {
  auto actor0 = GpuTask("actor", {0, 1}), rollout0 = GpuTask("rollout", {0, 1});
  auto actor1 = GpuTask("actor", {2, 3}), solo = GpuTask("solo", {4}), big = GpuTask("big", {5, 6});
  TaskRef a0 = StartOrDie(actor0), r0 = StartOrDie(rollout0), a1 = StartOrDie(actor1), s = StartOrDie(solo);
  // Colocated roles: one node, identical physical ids; replicas: disjoint ones.
  EXPECT_EQ(a0.data.value("node", ""), "node0");
  EXPECT_EQ(r0.data.value("node", ""), "node0");
  EXPECT_EQ(a1.data.value("node", ""), "node0") << "node1 has one GPU: it gets no two-GPU task";
  EXPECT_EQ(Cvd(actor0), "CVD=4,5");
  EXPECT_EQ(Cvd(rollout0), "CVD=4,5");
  EXPECT_EQ(Cvd(actor1), "CVD=6,7");
  // node0 is full: the one-GPU task goes to node1 and sees node1's id.
  EXPECT_EQ(s.data.value("node", ""), "node1");
  EXPECT_EQ(Cvd(solo), "CVD=1");
  // Nothing has two free GPUs now.
  auto none = exec_->Start(big);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kResourceExhausted) << none.status().ToString();
  EXPECT_TRUE(IsRetryableStart(none.status())) << "the daemon waits for GPUs to free up";
  // A replica's GPUs are free again once it ended.
  ASSERT_TRUE(exec_->Kill(a1).ok());
  ASSERT_TRUE(WaitExit(actor1.task_id));
  TaskRef b = StartOrDie(big);
  EXPECT_EQ(b.data.value("node", ""), "node0");
  EXPECT_EQ(Cvd(big), "CVD=6,7");
  for (const auto& ref : {a0, r0, s, b}) EXPECT_TRUE(exec_->Kill(ref).ok());
  ExpectExactlyOnce();
}

}  // namespace
}  // namespace tandem::backends::testing
