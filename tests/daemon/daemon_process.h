// Test harness: a real tandemd process on a private state dir, started from
// $TANDEM_BIN_DIR, reached through its unix socket with the real client.
// Stops only the process it started (by pid).
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
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "orchestrator/cli/client.h"

extern char** environ;

namespace tandem::testing {

inline std::filesystem::path BinDir() {
  const char* d = std::getenv("TANDEM_BIN_DIR");
  return d ? d : "build/bin";
}

inline std::filesystem::path MakeTempDir(const std::string& prefix) {
  std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
  if (!::mkdtemp(tmpl.data())) return {};
  return tmpl;
}

inline std::string ReadFile(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The JSON lines of a file (empty lines skipped).
inline std::vector<nlohmann::json> JsonLines(const std::filesystem::path& p) {
  std::vector<nlohmann::json> out;
  std::ifstream in(p);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

// A colocated actor+rollout job of probe workers on one device, the actor the
// controller running `cycles` cycles of rollout,train,sync; `probe_args` go
// first on both probes' command lines (e.g. {"--control", "tcp:..."}).
inline nlohmann::json ProbeHandoffSpec(const std::string& name, const std::string& backend, int cycles,
                                       const std::vector<std::string>& probe_args = {}) {
  auto probe = [&](std::vector<std::string> tags, std::vector<std::string> extra) {
    std::vector<std::string> args = probe_args;
    args.insert(args.end(), {"--cpu-capacity", "64MiB", "--start-released"});
    for (const auto& t : tags) args.insert(args.end(), {"--tag", t});
    args.insert(args.end(), extra.begin(), extra.end());
    return nlohmann::json{{"worker", "probe"}, {"args", args}, {"replicas", 1}, {"gpus_per_replica", 1}};
  };
  nlohmann::json actor = probe({"params=2MiB:backup", "grads=2MiB", "optimizer=2MiB:backup", "activations=1MiB"},
                               {"--controller", "--cycles", std::to_string(cycles), "--phases", "rollout,train,sync"});
  nlohmann::json rollout = probe({"weights=2MiB:backup", "kv_cache=2MiB", "cuda_graph=1MiB:backup"}, {});
  rollout["colocate_with"] = "actor";
  return {{"name", name},
          {"backend", {{"kind", backend}}},
          {"devices", {{"count", 1}}},
          {"roles", {{"actor", actor}, {"rollout", rollout}}},
          {"handoff",
           {{"roles", {{"actor", "actor"}, {"rollout", "rollout"}}}, {"controller", "actor"}, {"gpu_memory", 10 << 20},
            {"timeout_s", 30}}}};
}

// Waits until `pred` holds, polling; false on timeout.
template <typename Pred>
bool WaitFor(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

inline bool ProcessAlive(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

class DaemonProcess {
 public:
  explicit DaemonProcess(std::filesystem::path state_dir, std::vector<std::string> extra = {})
      : state_dir_(std::move(state_dir)), extra_(std::move(extra)) {}
  ~DaemonProcess() { Stop(); }

  void Start() {
    std::vector<std::string> args = {(BinDir() / "tandemd").string(), "--state-dir", state_dir_.string(),
                                     "--log-level", "info"};
    args.insert(args.end(), extra_.begin(), extra_.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    const std::string log = (state_dir_ / "tandemd.log").string();
    std::filesystem::create_directories(state_dir_);
    posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    // The daemon gets this process's environment minus the backend switches
    // a developer's shell may export (TANDEM_REDIS_URL, TANDEM_SLURM_JOB):
    // a test daemon enables a backend only through `extra`.
    std::vector<std::string> env_text;
    for (char** e = environ; *e; ++e) {
      const std::string_view v(*e);
      if (v.rfind("TANDEM_REDIS", 0) == 0 || v.rfind("TANDEM_SLURM_JOB=", 0) == 0) continue;
      env_text.emplace_back(v);
    }
    std::vector<char*> envp;
    for (auto& e : env_text) envp.push_back(e.data());
    envp.push_back(nullptr);
    ASSERT_EQ(::posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), envp.data()), 0);
    posix_spawn_file_actions_destroy(&fa);
    ASSERT_TRUE(WaitFor([&] {
      auto r = client().Request("GET", "/healthz");
      return r.ok() && r->status == 200;
    })) << "tandemd did not come up; log:\n" << ReadFile(log);
  }

  // SIGKILL: the daemon gets no chance to clean up (tasks keep running).
  void Kill9() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  void Stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    int status = 0;
    for (int i = 0; i < 500 && ::waitpid(pid_, &status, WNOHANG) == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (ProcessAlive(pid_)) { ::kill(pid_, SIGKILL); ::waitpid(pid_, nullptr, 0); }
    pid_ = -1;
  }

  cli::Client client(int timeout_s = 30) const {
    return cli::Client(cli::Endpoint{(state_dir_ / "tandemd.sock").string()}, timeout_s);
  }

  // Submits a spec; returns the job id ("" and a test failure otherwise).
  std::string Submit(const nlohmann::json& spec) {
    auto r = client().Request("POST", "/v1/jobs", spec.dump());
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return "";
    EXPECT_EQ(r->status, 201) << r->body;
    return r->Json().value("id", "");
  }

  nlohmann::json Job(const std::string& id) {
    auto r = client().Request("GET", "/v1/jobs/" + id);
    if (!r.ok() || r->status != 200) return nullptr;
    return r->Json();
  }

  std::string JobState(const std::string& id) {
    auto j = Job(id);
    return j.is_object() ? j.value("state", "") : "";
  }

  // Waits for a terminal state; returns it.
  std::string WaitJob(const std::string& id, std::chrono::seconds timeout = std::chrono::seconds(60)) {
    std::string st;
    WaitFor([&] {
      st = JobState(id);
      return st == "succeeded" || st == "failed" || st == "cancelled";
    }, timeout);
    return st;
  }

  pid_t pid() const { return pid_; }
  const std::filesystem::path& state_dir() const { return state_dir_; }
  std::string log() const { return ReadFile(state_dir_ / "tandemd.log"); }

 private:
  std::filesystem::path state_dir_;
  std::vector<std::string> extra_;
  pid_t pid_ = -1;
};

// A one-role job of `replicas` bash tasks running `script`.
inline nlohmann::json BashJob(const std::string& name, const std::string& script, int replicas = 1,
                              nlohmann::json role_extra = nlohmann::json::object()) {
  nlohmann::json role = {{"command", {"bash", "-c", script}}, {"replicas", replicas}};
  role.update(role_extra);
  return {{"name", name}, {"backend", {{"kind", "local"}}}, {"roles", {{"main", role}}}};
}

}  // namespace tandem::testing
