// Data-parallel replicas (data_parallel.h, grpo_trainer.h) with real
// processes: train_dp_worker is one replica, rendezvousing on a free
// loopback port. 1 process on the whole batch and 2 on halves of the groups
// end with the same parameters (up to reduction order) and log the same
// global stats; a peer killed with SIGKILL mid all-reduce, one that stops
// answering and one that never arrives are errors within the timeout; bad
// options are InvalidArgument.
#include "workers/collective/group.h"
#include "workers/collective/tests/free_port.h"

#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "workers/train/tests/dp_test_util.h"

extern char** environ;

namespace tandem::train {
namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

[[maybe_unused]] double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

using collective::testing::FreePort;

// A train_dp_worker process; killed (SIGKILL, by pid) and reaped if still running.
class Worker {
 public:
  explicit Worker(std::vector<std::string> args) {
    const std::string exe = (fs::read_symlink("/proc/self/exe").parent_path() / "train_dp_worker").string();
    args.insert(args.begin(), exe);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    EXPECT_EQ(posix_spawn(&pid_, exe.c_str(), nullptr, nullptr, argv.data(), environ), 0) << exe;
  }
  ~Worker() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  // Its exit code, or -1 when it did not exit within `limit` (then killed).
  int Wait(std::chrono::seconds limit) {
    const Clock::time_point deadline = Clock::now() + limit;
    while (Clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }
  void Kill() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
};

// Rank 0 of 2: `timeout` for each collective, `connect` for the rendezvous
// (a worker under ASan takes seconds to start).
collective::GroupOptions Rank0Of2(int port, std::chrono::milliseconds timeout,
                             std::chrono::milliseconds connect = std::chrono::seconds(60)) {
  collective::GroupOptions o;
  o.world_size = 2;
  o.port = port;
  o.timeout = timeout;
  o.connect_timeout = connect;
  return o;
}

[[maybe_unused]] std::vector<float> ReadFloats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

[[maybe_unused]] std::vector<std::vector<double>> ReadStats(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::vector<double>> rows;
  for (std::string line; std::getline(in, line);) {
    std::istringstream s(line);
    rows.emplace_back();
    for (double v; s >> v;) rows.back().push_back(v);
  }
  return rows;
}

TEST(DataParallel, RefusesBadOptions) {
  auto refused = [](collective::GroupOptions o, const std::string& needle) {
    auto g = collective::Group::Connect(o);
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument) << g.status().ToString();
    EXPECT_NE(g.status().message().find(needle), std::string::npos) << g.status().ToString();
  };
  collective::GroupOptions o = Rank0Of2(29999, std::chrono::seconds(1));
  o.rank = 2;
  refused(o, "rank 2 outside [0, world_size = 2)");
  o.rank = -1;
  refused(o, "rank -1 outside");
  o = Rank0Of2(0, std::chrono::seconds(1));
  refused(o, "port must be in [1, 65535]");
  o.port = 70000;
  refused(o, "port must be in [1, 65535]");
  o = Rank0Of2(29999, std::chrono::milliseconds(0));
  refused(o, "timeout must be > 0");
  o = Rank0Of2(29999, std::chrono::seconds(1), std::chrono::seconds(0));
  refused(o, "connect_timeout must be > 0");
  o = Rank0Of2(29999, std::chrono::seconds(1));
  o.world_size = 0;
  o.rank = 0;
  refused(o, "world_size must be >= 1");
  o = Rank0Of2(29999, std::chrono::seconds(1));
  o.host = "";
  refused(o, "host");
}

TEST(DataParallel, OneRankNeedsNoNetworking) {
  collective::GroupOptions o;  // world_size 1, port 0: nothing listens
  auto g = collective::Group::Connect(o);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ((*g)->backend(), "local");
  std::vector<at::Tensor> t = {at::ones({3})};
  ASSERT_TRUE((*g)->AllReduceSum(t).ok());
  EXPECT_EQ(t[0].sum().item<float>(), 3.0f);
  std::vector<double> v = {2.5};
  ASSERT_TRUE((*g)->AllReduce(v, collective::HostReduce::kMax).ok());
  EXPECT_EQ(v[0], 2.5);
  EXPECT_TRUE((*g)->Barrier().ok());
}

#if TANDEM_DP_GLOO_BUILT

// The equivalence: `config` on 1 process (this one, the "local" group) and
// on 2 train_dp_worker processes.
void ExpectSameModel(const dptest::RunConfig& config) {
  SCOPED_TRACE(config.optimizer + ", " + config.algorithm + ", micro-batch cap " + std::to_string(config.micro_batch_tokens) + ", rank 0 has " +
               std::to_string(config.rank0_groups) + " of 4 groups");
  at::set_num_threads(1);
  auto local = collective::Group::Connect({});
  ASSERT_TRUE(local.ok());
  auto one = dptest::Run(config, **local);
  ASSERT_TRUE(one.ok()) << one.status().ToString();

  const fs::path dir = fs::temp_directory_path() / ("tandem_dp_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string port = std::to_string(FreePort());
  const Clock::time_point t0 = Clock::now();
  std::vector<std::unique_ptr<Worker>> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.push_back(std::make_unique<Worker>(std::vector<std::string>{
        "train", std::to_string(r), "2", port, (dir / ("rank" + std::to_string(r))).string(), config.algorithm,
        std::to_string(config.micro_batch_tokens), std::to_string(config.steps), std::to_string(config.rank0_groups), "-1",
        config.optimizer}));
  for (int r = 0; r < 2; ++r) ASSERT_EQ(ranks[r]->Wait(std::chrono::seconds(90)), 0) << "rank " << r;
  std::printf("[dp] 2 processes, %d steps: %.2f s (start-up included)\n", config.steps, Seconds(t0));

  const std::vector<float> p0 = ReadFloats(dir / "rank0"), p1 = ReadFloats(dir / "rank1");
  ASSERT_EQ(p0.size(), one->params.size());
  ASSERT_EQ(p1.size(), one->params.size());
  double max_diff = 0;
  for (size_t i = 0; i < p0.size(); ++i) {
    EXPECT_EQ(p0[i], p1[i]) << "the replicas differ at element " << i;
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(p0[i]) - one->params[i]));
  }
  // The first step's gradient: every rank holds the whole batch's.
  const std::vector<float> g0 = ReadFloats(dir / "rank0.grad"), g1 = ReadFloats(dir / "rank1.grad");
  ASSERT_EQ(g0.size(), one->first_grad.size());
  ASSERT_EQ(g1.size(), one->first_grad.size());
  double scale = 0, grad_diff = 0;
  for (size_t i = 0; i < g0.size(); ++i) {
    EXPECT_EQ(g0[i], g1[i]) << "the replicas' gradients differ at element " << i;
    scale = std::max(scale, std::fabs(static_cast<double>(one->first_grad[i])));
    grad_diff = std::max(grad_diff, std::fabs(static_cast<double>(g0[i]) - one->first_grad[i]));
  }
  ASSERT_GT(scale, 0);
  std::printf("[dp] first step: max |grad(2 ranks) - grad(1 rank)| = %.3g of max |grad| %.3g; after %d steps: max "
              "|params(2 ranks) - params(1 rank)| = %.3g\n",
              grad_diff, scale, config.steps, max_diff);
  EXPECT_LE(grad_diff, 1e-5 * scale);
  // lr 1e-2: AdamW moves a parameter by lr * g / (|g| + eps), up to ~1e-2
  // a step, which is not smooth in g where |g| is small: gradients equal to
  // 1e-6 of their scale end 3 steps ~3e-5 apart (grpo, measured); 1% of one step.
  EXPECT_LT(max_diff, 1e-4);

  const auto stats = ReadStats(dir / "rank0.stats");
  ASSERT_EQ(stats.size(), one->steps.size());
  for (size_t s = 0; s < stats.size(); ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    const GrpoStepStats& want = one->steps[s];
    ASSERT_EQ(stats[s].size(), 12u);
    EXPECT_EQ(stats[s][0], want.updated ? 1 : 0);
    // Step 0 starts from equal parameters: only the reduction order differs.
    // Later steps start from parameters up to max_diff apart (above), and the
    // loss and norm follow them: 4.5e-6 of a loss of 1.87 at step 1 (grpo,
    // AVX2 or AVX-512 kernels; 0 with ATen's default kernels), so 1e-4
    // relative, as max_diff's bound.
    const double rel = s == 0 ? 1e-5 : 1e-4;
    const double pg_loss = want.loss.count("pg_loss") ? want.loss.at("pg_loss") : 0.0;
    EXPECT_NEAR(stats[s][1], want.grad_norm, rel * want.grad_norm);
    EXPECT_NEAR(stats[s][2], want.reward_mean, 1e-12);
    EXPECT_NEAR(stats[s][3], want.reward_std, 1e-12);
    EXPECT_NEAR(stats[s][4], pg_loss, s == 0 ? 1e-6 : rel * std::max(1.0, std::fabs(pg_loss)));
    EXPECT_EQ(stats[s][5], want.trajectories);
    EXPECT_EQ(stats[s][6], want.groups);
    EXPECT_EQ(stats[s][7], want.response_tokens);
    EXPECT_GE(stats[s][8], want.micro_batches);
  }
  if (config.optimizer == "muon") {
    // Each rank updated its own matrices (and the gather gave it the rest).
    const auto stats1 = ReadStats(dir / "rank1.stats");
    ASSERT_FALSE(stats1.empty());
    const double own0 = stats.back()[10], own1 = stats1.back()[10], all = static_cast<double>(one->muon_owned);
    std::printf("[dp] muon: rank 0 updates %.0f, rank 1 %.0f of %.0f elements of matrices\n", own0, own1, all);
    EXPECT_EQ(own0 + own1, all);
    EXPECT_GT(own0, 0.3 * all);
    EXPECT_GT(own1, 0.3 * all);
  }
  double t1 = 0, t2 = 0;
  for (size_t s = 1; s < stats.size(); ++s) t1 += one->seconds[s], t2 += stats[s][9];  // past the first step
  std::printf("[dp] step time after the first: 1 rank %.1f ms, 2 ranks %.1f ms\n", 1e3 * t1 / (stats.size() - 1),
              1e3 * t2 / (stats.size() - 1));
  fs::remove_all(dir);
}

TEST(DataParallel, TwoProcessesTrainTheModelOneDoes) {
  // Dr. GRPO (sequence-sum normaliser) with a micro-batch cap: the ranks
  // run different numbers of micro-batches.
  ExpectSameModel({.algorithm = "dr_grpo", .micro_batch_tokens = 12, .steps = 3, .rank0_groups = 2});
  // GRPO with its KL term to a reference (seq-mean-token-mean).
  ExpectSameModel({.algorithm = "grpo", .micro_batch_tokens = 0, .steps = 3, .rank0_groups = 2});
  // DAPO (token-mean, dynamic sampling): rank 1's only group has equal
  // rewards, so it trains nothing and still takes part in every collective.
  ExpectSameModel({.algorithm = "dapo", .micro_batch_tokens = 0, .steps = 3, .rank0_groups = 3});
  // Muon: each rank orthogonalises its own matrices, the others' arrive by
  // the gather.
  ExpectSameModel({.algorithm = "grpo", .micro_batch_tokens = 0, .steps = 3, .rank0_groups = 2, .optimizer = "muon"});
}

// ZeRO-1 (adamw.h "Sharded"): AdamW's state sharded across two ranks, each
// updating its half of the elements and the parameters gathered after
// every step, against the same two ranks with the state replicated: the
// same parameters on both ranks and the same gathered state, bit for bit,
// with each rank holding about half of the state.
TEST(DataParallel, ShardedAdamWIsTheReplicatedOneBitForBit) {
  at::set_num_threads(1);
  const fs::path dir = fs::temp_directory_path() / ("tandem_dp_shard_" + std::to_string(getpid()));
  fs::create_directories(dir);
  for (const std::string optimizer : {"adamw", "adamw-shard"}) {
    const std::string port = std::to_string(FreePort());
    std::vector<std::unique_ptr<Worker>> ranks;
    for (int r = 0; r < 2; ++r)
      ranks.push_back(std::make_unique<Worker>(std::vector<std::string>{
          "train", std::to_string(r), "2", port, (dir / (optimizer + std::to_string(r))).string(), "grpo", "0", "3", "2",
          "-1", optimizer}));
    for (int r = 0; r < 2; ++r) ASSERT_EQ(ranks[r]->Wait(std::chrono::seconds(90)), 0) << optimizer << " rank " << r;
  }
  const auto bits = [&](const std::string& name) { return ReadFloats(dir / name); };
  const std::vector<float> replicated = bits("adamw0"), sharded0 = bits("adamw-shard0"), sharded1 = bits("adamw-shard1");
  ASSERT_FALSE(replicated.empty());
  ASSERT_EQ(sharded0.size(), replicated.size());
  ASSERT_EQ(sharded1.size(), replicated.size());
  EXPECT_EQ(std::memcmp(sharded0.data(), replicated.data(), replicated.size() * 4), 0) << "rank 0's parameters";
  EXPECT_EQ(std::memcmp(sharded1.data(), replicated.data(), replicated.size() * 4), 0) << "rank 1's parameters";
  const std::vector<float> state = bits("adamw0.state"), gathered = bits("adamw-shard0.state");
  ASSERT_FALSE(state.empty());
  ASSERT_EQ(gathered.size(), state.size());
  EXPECT_EQ(std::memcmp(gathered.data(), state.data(), state.size() * 4), 0) << "the gathered state";
  const double whole = ReadStats(dir / "adamw0.stats").back()[11], half0 = ReadStats(dir / "adamw-shard0.stats").back()[11],
               half1 = ReadStats(dir / "adamw-shard1.stats").back()[11];
  std::printf("[dp] adamw state: replicated %.0f B a rank; sharded %.0f + %.0f B; %zu parameters and %zu state values "
              "equal bit for bit\n", whole, half0, half1, replicated.size(), state.size());
  EXPECT_EQ(half0 + half1, whole);
  EXPECT_GT(half0, 0.45 * whole);
  EXPECT_GT(half1, 0.45 * whole);
  fs::remove_all(dir);
}

// Muon's gather of bf16 parameters' fp32 masters (native: on the device;
// staged: streamed through the buffers a second time): two ranks, each
// orthogonalising its own matrices, end with the parameters and the whole
// optimizer state of one process, bit for bit, so rank 0's checkpoint
// restores into any number of ranks.
TEST(DataParallel, MuonOnTwoRanksHoldsOneProcesssStateBitForBit) {
  at::set_num_threads(1);
  auto local = collective::Group::Connect({});
  ASSERT_TRUE(local.ok());
  const fs::path dir = fs::temp_directory_path() / ("tandem_dp_muon_" + std::to_string(getpid()));
  fs::create_directories(dir);
  for (const std::string residency : {"native", "staged"}) {
    SCOPED_TRACE(residency);
    auto one = dptest::RunMuonBf16(residency, 4, **local);
    ASSERT_TRUE(one.ok()) << one.status().ToString();
    const std::string port = std::to_string(FreePort());
    std::vector<std::unique_ptr<Worker>> ranks;
    for (int r = 0; r < 2; ++r)
      ranks.push_back(std::make_unique<Worker>(std::vector<std::string>{
          "muon", std::to_string(r), "2", port, (dir / ("rank" + std::to_string(r))).string(), residency, "4"}));
    for (int r = 0; r < 2; ++r) ASSERT_EQ(ranks[r]->Wait(std::chrono::seconds(90)), 0) << "rank " << r;
    for (int r = 0; r < 2; ++r) {
      const std::vector<float> got = ReadFloats(dir / ("rank" + std::to_string(r)));
      ASSERT_EQ(got.size(), one->size());
      size_t differ = 0;
      for (size_t i = 0; i < got.size(); ++i) differ += got[i] != (*one)[i];
      EXPECT_EQ(differ, 0u) << "rank " << r << ": " << differ << " of " << got.size() << " values differ";
    }
    std::printf("[dp] muon bf16 %s: 2 ranks hold 1 process's parameters and state (%zu values) bit for bit\n",
                residency.c_str(), one->size());
  }
  fs::remove_all(dir);
}

TEST(DataParallel, ABadShareOnOneRankFailsEveryRanksStep) {
  const int port = FreePort();
  Worker peer({"train", "1", "2", std::to_string(port), "/dev/null", "dr_grpo", "0", "1", "2", "1", "adamw"});
  auto g = collective::Group::Connect(Rank0Of2(port, std::chrono::seconds(20)));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto r = dptest::Run({.algorithm = "dr_grpo", .steps = 1, .rank0_groups = 2, .bad_rank = 1}, **g);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().ToString();
  EXPECT_NE(r.status().message().find("another data-parallel replica failed this step"), std::string::npos)
      << r.status().ToString();
  EXPECT_EQ(peer.Wait(std::chrono::seconds(60)), 1) << "rank 1 fails with its own error (groups not contiguous)";
}

TEST(DataParallel, APeerKilledMidAllReduceIsAnErrorNotAHang) {
  const int port = FreePort();
  Worker peer({"hang", "1", "2", std::to_string(port)});
  auto g = collective::Group::Connect(Rank0Of2(port, std::chrono::seconds(20)));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ((*g)->backend(), "gloo");
  ASSERT_TRUE((*g)->Barrier().ok());
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    peer.Kill();
  });
  const Clock::time_point t0 = Clock::now();
  std::vector<at::Tensor> grads = {at::ones({1 << 16})};
  const Status s = (*g)->AllReduceSum(grads);
  const double took = Seconds(t0);
  killer.join();
  ASSERT_FALSE(s.ok());
  std::printf("[dp] killed peer: %s after %.2f s\n", s.ToString().c_str(), took);
  EXPECT_TRUE(s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_NE(s.message().find("gloo all-reduce of 65536 elements"), std::string::npos) << s.ToString();
  EXPECT_LT(took, 10.0) << "the death is seen when the socket closes, not at the 20 s timeout";
  const Status after = (*g)->Barrier();
  EXPECT_EQ(after.code(), StatusCode::kFailedPrecondition) << after.ToString();
  EXPECT_NE(after.message().find("broken"), std::string::npos) << after.ToString();
}

TEST(DataParallel, BroadcastCarriesRank0sBytesToEveryRank) {
  const int port = FreePort();
  std::string big(5 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 2654435761u) >> 13);
  const std::vector<std::string> messages = {big, "", std::string("a\0b\n", 4)};
  Worker peer({"echo", "1", "2", std::to_string(port), std::to_string(messages.size())});
  auto g = collective::Group::Connect(Rank0Of2(port, std::chrono::seconds(30)));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  for (std::string m : messages) {
    double sum = 0;
    for (const char c : m) sum += static_cast<unsigned char>(c);
    ASSERT_TRUE((*g)->Broadcast(m, std::chrono::seconds(1)).ok());
    std::vector<double> digest = {0, 0};  // the peer's {size, byte sum} of what it received
    ASSERT_TRUE((*g)->AllReduce(digest, collective::HostReduce::kSum).ok());
    EXPECT_EQ(digest[0], static_cast<double>(m.size()));
    EXPECT_EQ(digest[1], sum);
  }
  EXPECT_EQ(peer.Wait(std::chrono::seconds(30)), 0);
}

TEST(DataParallel, ABroadcastRank0NeverSendsIsAnErrorNotAHang) {
  for (const bool kill_rank0 : {true, false}) {
    const int port = FreePort();
    Worker rank0({"hang", "0", "2", std::to_string(port)});
    collective::GroupOptions o = Rank0Of2(port, std::chrono::seconds(20));
    o.rank = 1;
    auto g = collective::Group::Connect(o);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    ASSERT_TRUE((*g)->Barrier().ok());
    std::thread killer([&] {
      if (!kill_rank0) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      rank0.Kill();
    });
    const Clock::time_point t0 = Clock::now();
    std::string m = "untouched";
    const Status s = (*g)->Broadcast(m, kill_rank0 ? std::chrono::seconds(20) : std::chrono::milliseconds(1500));
    const double took = Seconds(t0);
    killer.join();
    ASSERT_FALSE(s.ok());
    std::printf("[dp] broadcast, rank 0 %s: %s after %.2f s\n", kill_rank0 ? "killed" : "silent", s.ToString().c_str(),
                took);
    EXPECT_EQ(s.code(), kill_rank0 ? StatusCode::kUnavailable : StatusCode::kDeadlineExceeded) << s.ToString();
    EXPECT_NE(s.message().find("broadcast 0 from rank 0"), std::string::npos) << s.ToString();
    EXPECT_LT(took, kill_rank0 ? 10.0 : 6.0);
  }
}

TEST(DataParallel, ARankArrivingAtAGroupThatFormedIsRefused) {
  const int port = FreePort();
  Worker peer({"hang", "1", "2", std::to_string(port)});
  auto g = collective::Group::Connect(Rank0Of2(port, std::chrono::seconds(20)));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_TRUE((*g)->Barrier().ok());
  // A restarted rank 1 while the old group lives: refused, not joined.
  collective::GroupOptions late = Rank0Of2(port, std::chrono::seconds(20), std::chrono::seconds(10));
  late.rank = 1;
  const Clock::time_point t0 = Clock::now();
  auto refused = collective::Group::Connect(late);
  ASSERT_FALSE(refused.ok());
  std::printf("[dp] late rank: %s after %.2f s\n", refused.status().ToString().c_str(), Seconds(t0));
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("has formed already"), std::string::npos) << refused.status().ToString();
  EXPECT_LT(Seconds(t0), 5.0);
}

TEST(DataParallel, APeerThatStopsAnsweringTimesOut) {
  const int port = FreePort();
  Worker peer({"hang", "1", "2", std::to_string(port)});
  auto g = collective::Group::Connect(Rank0Of2(port, std::chrono::milliseconds(1500)));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_TRUE((*g)->Barrier().ok());
  const Clock::time_point t0 = Clock::now();
  std::vector<double> v = {1.0, 2.0};
  const Status s = (*g)->AllReduce(v, collective::HostReduce::kSum);
  const double took = Seconds(t0);
  ASSERT_FALSE(s.ok());
  std::printf("[dp] silent peer: %s after %.2f s\n", s.ToString().c_str(), took);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_GE(took, 1.4);
  EXPECT_LT(took, 6.0);
}

TEST(DataParallel, APeerThatNeverArrivesTimesOut) {
  for (int rank : {0, 1}) {  // rank 0 waits for its peer; rank 1 finds nobody listening
    collective::GroupOptions o = Rank0Of2(FreePort(), std::chrono::seconds(60), std::chrono::milliseconds(1500));
    o.rank = rank;
    const Clock::time_point t0 = Clock::now();
    auto g = collective::Group::Connect(o);
    const double took = Seconds(t0);
    ASSERT_FALSE(g.ok()) << "rank " << rank;
    std::printf("[dp] rank %d alone: %s after %.2f s\n", rank, g.status().ToString().c_str(), took);
    EXPECT_EQ(g.status().code(), StatusCode::kDeadlineExceeded) << g.status().ToString();
    EXPECT_NE(g.status().message().find("rendezvous"), std::string::npos) << g.status().ToString();
    EXPECT_LT(took, 6.0);
  }
}

#else

TEST(DataParallel, WithoutGlooConnectSaysWhatIsMissing) {
  auto g = collective::Group::Connect(Rank0Of2(29999, std::chrono::seconds(1)));
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kFailedPrecondition) << g.status().ToString();
  EXPECT_NE(g.status().message().find("libgloo-dev"), std::string::npos) << g.status().ToString();
}

#endif

}  // namespace
}  // namespace tandem::train
