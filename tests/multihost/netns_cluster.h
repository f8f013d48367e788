// Test harness for multi-host tests of the redis backend (issue #6 part 5;
// docs/redis.md "Tests"): several "hosts" on one machine, each a network
// namespace joined to the root namespace by a veth pair, with its own
// address and its own `tandem-agent`; a private redis-server (AUTH by
// password, append-only file fsynced on every write) in the root namespace,
// listening on loopback and on the root side of every veth pair; and a
// cluster key. tandemd (tests/daemon/daemon_process.h) runs in the root
// namespace and reaches Redis on loopback.
//
// Everything it creates carries a generated tag (namespaces tdm-<tag>-h<i>,
// veth devices tv<tag>r<i>/tv<tag>n<i>, a 10.<n>.<i>.0/24 per host) and is
// removed by name in the destructor, also when a test fails. Processes are
// stopped by the pids it started. Needs root (`ip netns`); tests skip without.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backends/redis/redis_conn.h"
#include "common/status.h"

namespace tandem::multihost {

namespace fs = std::filesystem;

inline fs::path BinDir() {
  const char* d = std::getenv("TANDEM_BIN_DIR");
  return d && *d ? d : "build/bin";
}

// Runs a shell command quietly (ip lives in /usr/sbin, which a test's PATH may lack).
inline int Sh(const std::string& cmd) {
  return std::system(("PATH=\"$PATH:/usr/sbin:/sbin\"; " + cmd + " >/dev/null 2>&1").c_str());
}

inline std::string IpBinary() { return fs::exists("/usr/sbin/ip") ? "/usr/sbin/ip" : fs::exists("/sbin/ip") ? "/sbin/ip" : "ip"; }

// Whether this process may create network namespaces.
inline bool CanUseNetns() {
  if (::geteuid() != 0 || Sh("command -v ip") != 0 || Sh("command -v redis-server") != 0) return false;
  std::random_device rd;
  const std::string probe = "tdm-probe-" + std::to_string(::getpid()) + "-" + std::to_string(rd() % 100000);
  if (Sh("ip netns add " + probe) != 0) return false;
  Sh("ip netns del " + probe);
  return true;
}

inline bool PidRunning(pid_t pid) {
  if (pid <= 0 || ::kill(pid, 0) != 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

// A child process started with posix_spawn, output to `log`; stopped by pid.
class Child {
 public:
  Child() = default;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() { Stop(); }

  bool Spawn(const std::vector<std::string>& args, const fs::path& log) {
    std::vector<std::string> env = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"};
    for (const char* k : {"ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"})
      if (const char* v = std::getenv(k)) env.push_back(std::string(k) + "=" + v);
    std::vector<char*> argv, envp;
    std::vector<std::string> a = args;
    for (auto& s : a) argv.push_back(s.data());
    argv.push_back(nullptr);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    int rc = posix_spawnp(&pid_, argv[0], &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) pid_ = -1;
    return rc == 0;
  }
  void Signal(int sig) {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  bool Reap(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (pid_ > 0) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) pid_ = -1;
      else if (std::chrono::steady_clock::now() > deadline) return false;
      else std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  }
  void Stop() {
    if (pid_ <= 0) return;
    Signal(SIGTERM);
    if (!Reap(std::chrono::seconds(6))) {
      Signal(SIGKILL);
      Reap(std::chrono::seconds(3));
    }
  }
  bool Running() { return pid_ > 0 && ::waitpid(pid_, nullptr, WNOHANG) == 0; }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

struct Host {
  std::string name;     // node name, "h1"...
  std::string netns;    // tdm-<tag>-h<i>
  std::string veth_root, veth_ns;
  std::string root_ip;  // 10.n.i.1 (Redis listens here)
  std::string ip;       // 10.n.i.2 (the host's address)
  std::unique_ptr<Child> agent;
  std::vector<std::string> agent_flags;  // more tandem-agent flags (--gpus, --run-root); set before Up
};

class NetnsCluster {
 public:
  explicit NetnsCluster(fs::path dir) : dir_(std::move(dir)) {
    std::random_device rd;
    tag_ = std::to_string(::getpid() % 10000) + std::to_string(rd() % 100);
    net_ = 100 + static_cast<int>(rd() % 150);
    port_ = 28000 + static_cast<int>(rd() % 1500);
    prefix_ = "mh" + tag_;
  }
  ~NetnsCluster() { Down(); }

  // Creates `n` hosts, starts Redis and one agent per host (lease in s).
  // `agent_flags[i]`, when given, are more flags for host i+1's agent
  // (default: --gpus 0,1).
  Status Up(int n, double lease_s, const std::vector<std::vector<std::string>>& agent_flags = {}) {
    lease_s_ = lease_s;
    fs::create_directories(dir_ / "redis");
    password_file_ = dir_ / "redis.password";
    key_file_ = dir_ / "cluster.key";
    WriteSecret(password_file_, RandomHex(24));
    WriteSecret(key_file_, RandomHex(32));
    for (int i = 1; i <= n; ++i) {
      Host h;
      h.name = "h" + std::to_string(i);
      h.netns = "tdm-" + tag_ + "-h" + std::to_string(i);
      h.veth_root = "tv" + tag_ + "r" + std::to_string(i);
      h.veth_ns = "tv" + tag_ + "n" + std::to_string(i);
      h.root_ip = "10." + std::to_string(net_) + "." + std::to_string(i) + ".1";
      h.ip = "10." + std::to_string(net_) + "." + std::to_string(i) + ".2";
      h.agent_flags = static_cast<size_t>(i - 1) < agent_flags.size() ? agent_flags[static_cast<size_t>(i - 1)]
                                                                      : std::vector<std::string>{"--gpus", "0,1"};
      hosts_.push_back(std::move(h));
      Host& x = hosts_.back();
      for (const std::string& cmd : {"ip netns add " + x.netns,
                                     "ip link add " + x.veth_root + " type veth peer name " + x.veth_ns,
                                     "ip link set " + x.veth_ns + " netns " + x.netns,
                                     "ip addr add " + x.root_ip + "/24 dev " + x.veth_root,
                                     "ip link set " + x.veth_root + " up",
                                     "ip -n " + x.netns + " addr add " + x.ip + "/24 dev " + x.veth_ns,
                                     "ip -n " + x.netns + " link set " + x.veth_ns + " up",
                                     "ip -n " + x.netns + " link set lo up"})
        if (Sh(cmd) != 0) return Internal("netns setup failed: " + cmd);
    }
    TANDEM_RETURN_IF_ERROR(StartRedis(), "redis");
    for (auto& h : hosts_) TANDEM_RETURN_IF_ERROR(StartAgent(h), "agent " + h.name);
    return WaitNodes(n);
  }

  void Down() {
    for (auto& h : hosts_) h.agent.reset();
    redis_.reset();
    for (auto& h : hosts_) {
      Sh("ip link del " + h.veth_root);
      Sh("ip netns del " + h.netns);
    }
    hosts_.clear();
  }

  Status StartRedis() {
    std::string bind = "127.0.0.1";
    for (auto& h : hosts_) bind += " " + h.root_ip;
    std::ifstream pw(password_file_);
    std::string password;
    std::getline(pw, password);
    std::ofstream(dir_ / "redis" / "redis.conf")
        << "bind " << bind << "\nport " << port_ << "\ndaemonize no\ndir " << (dir_ / "redis").string()
        << "\nsave \"\"\nappendonly yes\nappendfsync always\nrequirepass " << password << "\n";
    redis_ = std::make_unique<Child>();
    if (!redis_->Spawn({"redis-server", (dir_ / "redis" / "redis.conf").string()}, dir_ / "redis" / "redis.log"))
      return Internal("cannot spawn redis-server");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      if (auto c = backends::redis::RedisConn::Connect(Config()); c.ok()) return Status::Ok();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return Unavailable("redis-server did not answer on port " + std::to_string(port_));
  }
  // SIGTERM (the AOF is fsynced on every write), then the same config again.
  Status RestartRedis(std::chrono::milliseconds down_for = std::chrono::milliseconds(0)) {
    redis_.reset();
    std::this_thread::sleep_for(down_for);
    return StartRedis();
  }

  Status StartAgent(Host& h, const std::string& password_file = "") {
    h.agent = std::make_unique<Child>();
    std::vector<std::string> args = {IpBinary(), "netns", "exec", h.netns, (BinDir() / "tandem-agent").string(),
                                     "--redis", "redis://" + h.root_ip + ":" + std::to_string(port_),
                                     "--redis-password-file",
                                     password_file.empty() ? password_file_.string() : password_file,
                                     "--cluster-key-file", key_file_.string(), "--name", h.name,
                                     "--address", h.ip, "--lease", std::to_string(lease_s_), "--prefix", prefix_,
                                     "--state-dir", (dir_ / ("agent-state-" + h.name)).string()};
    args.insert(args.end(), h.agent_flags.begin(), h.agent_flags.end());
    if (!h.agent->Spawn(args, AgentLogPath(h))) return Internal("cannot spawn tandem-agent");
    return Status::Ok();
  }

  // Waits until `n` nodes hold a live lease.
  Status WaitNodes(int n, std::chrono::seconds timeout = std::chrono::seconds(20)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (LiveNodes() >= n) return Status::Ok();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return DeadlineExceeded("fewer than " + std::to_string(n) + " agents registered");
  }
  int LiveNodes() {
    auto c = backends::redis::RedisConn::Connect(Config());
    if (!c.ok()) return 0;
    int live = 0;
    for (auto& h : hosts_) {
      auto e = (*c)->Command({"EXISTS", prefix_ + ":node:" + h.name});
      live += e.ok() && e->integer == 1;
    }
    return live;
  }

  // Cuts the host off the network (its veth goes down), or joins it again.
  Status SetLink(const Host& h, bool up) {
    const std::string cmd = "ip -n " + h.netns + " link set " + h.veth_ns + (up ? " up" : " down");
    return Sh(cmd) == 0 ? Status::Ok() : Internal("failed: " + cmd);
  }

  backends::redis::RedisConfig Config() const {
    backends::redis::RedisConfig c;
    c.host = "127.0.0.1";
    c.port = port_;
    c.password_file = password_file_.string();
    return c;
  }
  std::string Url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  // tandemd flags for this cluster.
  std::vector<std::string> DaemonFlags() const {
    return {"--redis", Url(), "--redis-password-file", password_file_.string(), "--cluster-key-file",
            key_file_.string(), "--redis-prefix", prefix_};
  }

  Host* FindHost(const std::string& name) {
    for (auto& h : hosts_)
      if (h.name == name) return &h;
    return nullptr;
  }
  std::vector<Host>& hosts() { return hosts_; }
  fs::path AgentLogPath(const Host& h) const { return dir_ / ("agent-" + h.name + ".log"); }
  std::string AgentLog(const Host& h) const {
    std::ifstream in(AgentLogPath(h));
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  std::string AllAgentLogs() const {
    std::string out;
    for (const auto& h : hosts_) out += "---- " + h.name + "\n" + AgentLog(h);
    return out;
  }
  const std::string& prefix() const { return prefix_; }
  const fs::path& dir() const { return dir_; }

 private:
  static std::string RandomHex(int n) {
    std::random_device rd;
    std::string s;
    for (int i = 0; i < n; ++i) s += "0123456789abcdef"[rd() % 16];
    return s;
  }
  static void WriteSecret(const fs::path& p, const std::string& text) {
    std::ofstream(p) << text << "\n";
    fs::permissions(p, fs::perms::owner_read | fs::perms::owner_write);
  }

  fs::path dir_;
  std::string tag_, prefix_;
  int net_ = 0, port_ = 0;
  double lease_s_ = 1;
  fs::path password_file_, key_file_;
  std::unique_ptr<Child> redis_;
  std::vector<Host> hosts_;
};

}  // namespace tandem::multihost
