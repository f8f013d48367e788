// Test-only helpers for the redis backend: the test Redis's connection info
// (scripts/services/redis.sh writes it to $TANDEM_SERVICES_DIR/redis.env),
// real `tandem-agent` processes, and the ExecutorHarness for the shared suite.
// With TANDEM_SERVICES_REQUIRED=1 a missing Redis is a failure, not a skip.
#pragma once

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backends/redis/redis_conn.h"
#include "backends/redis/redis_executor.h"
#include "backends/tests/executor_test_fixture.h"

extern char** environ;

namespace tandem::backends::testing {

inline std::string ServicesDir() {
  const char* d = std::getenv("TANDEM_SERVICES_DIR");
  return d && *d ? d : "/tmp/tandem-services";
}

// KEY=VALUE lines of redis.env (empty when absent).
inline std::map<std::string, std::string> RedisEnv() {
  std::map<std::string, std::string> out;
  std::ifstream in(ServicesDir() + "/redis.env");
  std::string line;
  while (std::getline(in, line)) {
    auto eq = line.find('=');
    if (line.empty() || line[0] == '#' || eq == std::string::npos) continue;
    out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

inline bool ServicesRequired() {
  const char* r = std::getenv("TANDEM_SERVICES_REQUIRED");
  return r && std::string(r) == "1";
}

inline std::string RedisUrl() {
  auto env = RedisEnv();
  return env.count("TANDEM_TEST_REDIS_URL") ? env["TANDEM_TEST_REDIS_URL"] : "redis://127.0.0.1:26379";
}

inline StatusOr<redis::RedisConfig> TestRedisConfig() {
  auto env = RedisEnv();
  auto c = redis::RedisConfig::FromUrl(RedisUrl(), env["TANDEM_TEST_REDIS_PASSWORD_FILE"]);
  if (c.ok() && env.count("TANDEM_TEST_REDIS_USER")) c->user = env["TANDEM_TEST_REDIS_USER"];
  return c;
}

inline bool RedisReachable() {
  auto c = TestRedisConfig();
  return c.ok() && redis::RedisConn::Connect(*c).ok();
}

inline std::string BinDir() {
  const char* d = std::getenv("TANDEM_BIN_DIR");
  return d && *d ? d : "build/bin";
}

inline std::string UniquePrefix(const std::string& what) {
  std::random_device rd;
  return "tandem-test-" + what + "-" + std::to_string(::getpid()) + "-" + std::to_string(rd() % 1000000);
}

// A cluster key file (0600) shared by every agent and executor of this test binary.
inline const std::string& TestClusterKeyFile() {
  // Removed when the test binary exits.
  struct KeyFile {
    std::string path;
    KeyFile() {
      std::random_device rd;
      path = (std::filesystem::temp_directory_path() /
              ("tandem-test-cluster-key-" + std::to_string(::getpid()) + "-" + std::to_string(rd() % 1000000)))
                 .string();
      std::string key;
      for (int i = 0; i < 32; ++i) key += "0123456789abcdef"[rd() % 16];
      std::ofstream(path) << key << "\n";
      std::filesystem::permissions(path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    }
    ~KeyFile() {
      std::error_code ec;
      std::filesystem::remove(path, ec);
    }
  };
  static const KeyFile file;
  return file.path;
}

inline redis::ClusterKey TestClusterKey() {
  auto k = redis::ClusterKey::FromFile(TestClusterKeyFile());
  return k.ok() ? *k : redis::ClusterKey::FromBytes("unreadable-test-key-file");
}

// One `tandem-agent` process, stopped (SIGTERM, then SIGKILL) by the destructor.
class AgentProcess {
 public:
  AgentProcess(std::string name, std::string prefix, double lease_s, std::string log_path)
      : name_(std::move(name)), prefix_(std::move(prefix)), lease_s_(lease_s), log_(std::move(log_path)) {}
  ~AgentProcess() { Stop(); }

  bool Spawn() {
    auto env = RedisEnv();
    std::vector<std::string> args = {BinDir() + "/tandem-agent", "--redis", RedisUrl(),
                                     "--redis-password-file", env["TANDEM_TEST_REDIS_PASSWORD_FILE"],
                                     "--name", name_, "--prefix", prefix_, "--lease", std::to_string(lease_s_),
                                     "--address", "127.0.0.1", "--cluster-key-file", TestClusterKeyFile(),
                                     "--state-dir", state_dir()};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    std::vector<std::string> envs = {"PATH=/usr/local/bin:/usr/bin:/bin",
                                     "TANDEM_REDIS_USER=" + env["TANDEM_TEST_REDIS_USER"]};
    if (const char* a = std::getenv("ASAN_OPTIONS")) envs.push_back(std::string("ASAN_OPTIONS=") + a);
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : envs) envp.push_back(e.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    int rc = posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    return rc == 0;
  }
  void Signal(int sig) {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  // Waits for the process to end (after a signal); true if it ended.
  bool Reap(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (pid_ > 0 && std::chrono::steady_clock::now() < deadline) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return pid_ <= 0;
  }
  bool Running() {
    if (pid_ <= 0) return false;
    int st = 0;
    return ::waitpid(pid_, &st, WNOHANG) == 0;
  }
  void Stop() {
    if (pid_ <= 0) return;
    Signal(SIGTERM);
    if (!Reap(std::chrono::seconds(6))) {
      Signal(SIGKILL);
      Reap(std::chrono::seconds(2));
    }
  }
  pid_t pid() const { return pid_; }
  const std::string& name() const { return name_; }
  // Beside the log; the same for an agent started again under the same name.
  std::string state_dir() const {
    return (std::filesystem::path(log_).parent_path() / (prefix_ + "-" + name_ + "-state")).string();
  }

  std::vector<std::string> extra_args;  // more flags, e.g. {"--gpus", "4,5"}

 private:
  std::string name_, prefix_;
  double lease_s_;
  std::string log_;
  pid_t pid_ = -1;
};

// Agents and a key prefix shared by an executor harness.
struct RedisCluster {
  std::string prefix;
  std::vector<std::unique_ptr<AgentProcess>> agents;

  // Spawns `n` agents and waits until all hold a lease.
  Status Up(int n, double lease_s, const std::string& log_dir) {
    for (int i = 0; i < n; ++i) {
      auto a = std::make_unique<AgentProcess>("node" + std::to_string(i), prefix, lease_s,
                                              log_dir + "/" + prefix + "-agent" + std::to_string(i) + ".log");
      if (!a->Spawn()) return Internal("cannot spawn tandem-agent from " + BinDir());
      agents.push_back(std::move(a));
    }
    return WaitNodes(n);
  }
  Status WaitNodes(int n) {
    TANDEM_ASSIGN_OR_RETURN(auto cfg, TestRedisConfig(), "redis config");
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    while (std::chrono::steady_clock::now() < deadline) {
      auto c = redis::RedisConn::Connect(cfg);
      if (c.ok()) {
        int live = 0;
        for (auto& a : agents) {
          auto e = (*c)->Command({"EXISTS", prefix + ":node:" + a->name()});
          if (e.ok() && e->integer == 1) ++live;
        }
        if (live >= n) return Status::Ok();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return DeadlineExceeded("agents did not register within 15 s");
  }
};

inline StatusOr<std::unique_ptr<redis::RedisExecutor>> MakeRedisExecutor(boost::asio::io_context& io,
                                                                        Executor::ExitCallback cb,
                                                                        const std::string& prefix) {
  TANDEM_ASSIGN_OR_RETURN(auto cfg, TestRedisConfig(), "redis config");
  redis::RedisExecutorOptions o;
  o.redis = cfg;
  o.keys.prefix = prefix;
  o.lease_check = std::chrono::milliseconds(100);
  o.cluster_key = TestClusterKey();
  return redis::RedisExecutor::Create(io, std::move(cb), o);
}

// The shared suite's harness: two agents on this machine (started on first use,
// stopped at exit), one prefix for the whole binary.
// A fixture with one real agent ("node0", `lease_s` lease) under a fresh prefix,
// the redis executor over it, and a raw connection for writing into Redis
// behind tandem's back. Skips (or fails with TANDEM_SERVICES_REQUIRED=1)
// without the redis service.
class OneAgentRedisTest : public ExecutorTestBase, public ::testing::Test {
 protected:
  explicit OneAgentRedisTest(std::string what, double lease_s = 2.0) : what_(std::move(what)), lease_s_(lease_s) {}
  void SetUp() override {
    if (!RedisReachable()) {
      if (ServicesRequired()) FAIL() << "redis is not reachable (scripts/services/redis.sh start)";
      GTEST_SKIP() << "redis is not running; scripts/services/redis.sh start";
    }
    cluster_.prefix = UniquePrefix(what_);
    auto st = cluster_.Up(1, lease_s_, dir_.path().string());
    ASSERT_TRUE(st.ok()) << st.ToString() << "\n" << AgentLog();
    std::string prefix = cluster_.prefix;
    Init({"redis", [prefix](boost::asio::io_context& io, Executor::ExitCallback cb)
                       -> StatusOr<std::unique_ptr<Executor>> {
            TANDEM_ASSIGN_OR_RETURN(auto e, MakeRedisExecutor(io, std::move(cb), prefix), "executor");
            return std::unique_ptr<Executor>(std::move(e));
          }});
    auto cfg = TestRedisConfig();
    ASSERT_TRUE(cfg.ok());
    cfg_ = *cfg;
    auto c = redis::RedisConn::Connect(*cfg);
    ASSERT_TRUE(c.ok());
    conn_ = std::move(c).value();
  }

  std::string AgentLog() { return ReadWholeFile(dir_.path() / (cluster_.prefix + "-agent0.log")); }

  std::string what_;
  double lease_s_;
  RedisCluster cluster_;
  redis::RedisConfig cfg_;
  std::unique_ptr<redis::RedisConn> conn_;
};

inline ExecutorHarness RedisHarness() {
  static auto cluster = std::make_shared<RedisCluster>();
  return {"redis", [](boost::asio::io_context& io, Executor::ExitCallback cb) -> StatusOr<std::unique_ptr<Executor>> {
            if (cluster->prefix.empty()) {
              cluster->prefix = UniquePrefix("suite");
              TANDEM_RETURN_IF_ERROR(cluster->Up(2, 3.0, std::filesystem::temp_directory_path().string()),
                                     "redis cluster");
            }
            TANDEM_ASSIGN_OR_RETURN(auto e, MakeRedisExecutor(io, std::move(cb), cluster->prefix), "executor");
            return std::unique_ptr<Executor>(std::move(e));
          }};
}

}  // namespace tandem::backends::testing
