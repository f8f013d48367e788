// The fixture behind the shared executor suite (executor_suite.h): a harness
// that creates an executor, an io_context to run it on, the exits it
// reported, and helpers to build requests and wait for them. Backend-specific
// tests use it too; unlike executor_suite.h it defines no tests, so any
// number of test files may include it.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "backends/executor.h"
#include "backends/task_env.h"

namespace tandem::backends::testing {

struct ExecutorHarness {
  std::string name;  // the test-name suffix, e.g. "local"
  std::function<StatusOr<std::unique_ptr<Executor>>(boost::asio::io_context&, Executor::ExitCallback)>
      make;
};

inline std::string ExecutorHarnessName(const ::testing::TestParamInfo<ExecutorHarness>& info) {
  return info.param.name;
}

// A fresh directory under $TMPDIR (or /tmp), removed by the destructor.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tandem-test-XXXXXX").string();
    char* made = ::mkdtemp(tmpl.data());
    if (made) path_ = made;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline std::string ReadWholeFile(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Base fixture: an io_context, an executor, the exits it reported, and
// helpers to build requests and wait. Also usable by backend-specific tests
// (derive and call Init(harness)).
class ExecutorTestBase {
 protected:
  void Init(const ExecutorHarness& harness) {
    harness_ = harness;
    ASSERT_FALSE(dir_.path().empty()) << "mkdtemp failed";
    io_ = std::make_unique<boost::asio::io_context>();
    auto made = harness_.make(*io_, Recorder());
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    exec_ = std::move(made).value();
  }

  // Replaces the executor (and its io_context) without touching its tasks,
  // as a restarted daemon would.
  void Restart() {
    exec_.reset();
    io_ = std::make_unique<boost::asio::io_context>();
    auto made = harness_.make(*io_, Recorder());
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    exec_ = std::move(made).value();
  }

  Executor::ExitCallback Recorder() {
    return [this](const std::string& task_id, const TaskExit& exit) {
      exits_[task_id] = exit;
      ++exit_calls_[task_id];
    };
  }

  // A request whose environment comes from BuildTaskEnvironment.
  LaunchRequest Request(const std::string& name, std::vector<std::string> argv,
                        TaskEnvInput env_in = {}) {
    LaunchRequest r;
    r.job_id = "suite";
    r.task_id = "suite." + name + "." + std::to_string(++serial_);
    r.argv = std::move(argv);
    env_in.job_id = r.job_id;
    env_in.task_id = r.task_id;
    if (env_in.role.empty()) env_in.role = name;
    env_in.run_dir = dir_.path().string();
    r.env = BuildTaskEnvironment(env_in);
    r.cwd = dir_.path();
    r.stdout_path = dir_.path() / (r.task_id + ".out");
    r.stderr_path = dir_.path() / (r.task_id + ".err");
    r.exit_path = dir_.path() / (r.task_id + ".exit.json");
    return r;
  }

  TaskRef StartOrDie(const LaunchRequest& r) {
    auto ref = exec_->Start(r);
    EXPECT_TRUE(ref.ok()) << ref.status().ToString();
    return ref.ok() ? *ref : TaskRef{};
  }

  // Runs the io_context until `task_id` exited; nullopt on timeout.
  std::optional<TaskExit> WaitExit(const std::string& task_id,
                                   std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!exits_.count(task_id) && std::chrono::steady_clock::now() < deadline) {
      io_->restart();
      io_->run_one_for(std::chrono::milliseconds(5));
    }
    if (!exits_.count(task_id)) return std::nullopt;
    return exits_[task_id];
  }

  // Polls `pred` (running the io_context meanwhile) until true or timeout.
  bool WaitUntil(const std::function<bool()>& pred,
                 std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!pred()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      io_->restart();
      io_->run_one_for(std::chrono::milliseconds(5));
    }
    return true;
  }

  bool FileContains(const std::filesystem::path& p, const std::string& s) {
    return ReadWholeFile(p).find(s) != std::string::npos;
  }

  // Every exit was reported exactly once (run briefly to catch late duplicates).
  void ExpectExactlyOnce() {
    io_->restart();
    io_->run_for(std::chrono::milliseconds(20));
    for (const auto& [task, n] : exit_calls_) EXPECT_EQ(n, 1) << task;
  }

  ExecutorHarness harness_;
  TempDir dir_;
  std::unique_ptr<boost::asio::io_context> io_;
  std::unique_ptr<Executor> exec_;
  std::map<std::string, TaskExit> exits_;
  std::map<std::string, int> exit_calls_;
  int serial_ = 0;
};

}  // namespace tandem::backends::testing
