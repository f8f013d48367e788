// The test cluster for the Slurm backend's tests (docs/testing.md, "Slurm"):
// one allocation (all 4 GPUs, 4 of 8 CPUs) shared by every test of the binary,
// submitted once with sbatch and cancelled when the binary ends. A test calls
// RequireCluster(): it skips when the cluster is down, and fails instead when
// TANDEM_SERVICES_REQUIRED=1 (scripts/test.sh).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <thread>

#include "backends/slurm/slurm_cli.h"
#include "backends/slurm/slurm_executor.h"
#include "backends/tests/executor_test_fixture.h"

namespace tandem::backends::testing {

inline bool ServicesRequired() {
  const char* v = std::getenv("TANDEM_SERVICES_REQUIRED");
  return v && std::string(v) == "1";
}

inline std::string ShimPath() {
  const char* bin = std::getenv("TANDEM_BIN_DIR");
  return bin ? std::string(bin) + "/tandem-exec" : std::string();
}

// Submits a holding batch job; returns its id once RUNNING, or "" with `why`.
inline std::string SubmitHoldingJob(const std::vector<std::string>& extra, std::string* why) {
  std::vector<std::string> argv = {"sbatch", "--parsable", "--job-name=tandem-test-alloc",
                                   "--output=/dev/null", "--time=10", "--chdir=/tmp"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back("--wrap=sleep 900");
  auto r = slurm::RunCommand(argv);
  if (!r.ok() || !r->ok()) {
    *why = "sbatch: " + (r.ok() ? r->err : r.status().ToString());
    return "";
  }
  std::string id = r->out.substr(0, r->out.find_first_of(";\n"));
  for (int i = 0; i < 300; ++i) {
    auto q = slurm::RunCommand({"squeue", "--noheader", "--jobs=" + id, "--format=%T"});
    if (q.ok() && q->out.rfind("RUNNING", 0) == 0) return id;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  *why = "allocation " + id + " did not start within 30 s";
  (void)slurm::RunCommand({"scancel", id});
  return "";
}

class SlurmCluster : public ::testing::Environment {
 public:
  static SlurmCluster& Get() {
    static SlurmCluster* c = [] {
      auto* env = new SlurmCluster;
      ::testing::AddGlobalTestEnvironment(env);  // gtest owns it; TearDown cancels
      return env;
    }();
    return *c;
  }
  // The allocation's job id, or "" with why() saying what is wrong.
  const std::string& job_id() {
    if (!tried_) {
      tried_ = true;
      if (!std::getenv("SLURM_CONF")) {
        why_ = "SLURM_CONF is unset (source /tmp/tandem-services/slurm.env)";
      } else {
        auto ping = slurm::RunCommand({"scontrol", "ping"}, std::chrono::seconds(5));
        if (!ping.ok() || ping->out.find("UP") == std::string::npos)
          why_ = "slurmctld is not answering (scripts/services/slurm.sh start)";
        else
          job_ = SubmitHoldingJob({"--ntasks=4", "--gres=gpu:4"}, &why_);
      }
    }
    return job_;
  }
  const std::string& why() const { return why_; }
  // Before any test: skip them all without a cluster, or fail when required.
  void SetUp() override {
    if (!job_id().empty()) return;
    if (ServicesRequired()) FAIL() << "Slurm test cluster: " << why_;
    GTEST_SKIP() << "Slurm test cluster: " << why_;
  }
  void TearDown() override {
    if (!job_.empty()) (void)slurm::RunCommand({"scancel", job_});
  }

 private:
  bool tried_ = false;
  std::string job_, why_;
};

inline ExecutorHarness SlurmHarness() {
  return {"slurm", [](boost::asio::io_context& io, Executor::ExitCallback cb)
                       -> StatusOr<std::unique_ptr<Executor>> {
            SlurmExecutorOptions o;
            o.job_id = SlurmCluster::Get().job_id();
            o.exec_shim = ShimPath();
            TANDEM_ASSIGN_OR_RETURN(auto e, SlurmExecutor::Create(io, std::move(cb), o), "harness");
            return std::unique_ptr<Executor>(std::move(e));
          }};
}

// Registered before main() so its SetUp gates every test.
inline const bool kSlurmClusterRegistered = (SlurmCluster::Get(), true);

// In a fixture's SetUp: skip (or fail when required) without a cluster.
#define TANDEM_REQUIRE_SLURM()                                                         \
  do {                                                                                 \
    if (SlurmCluster::Get().job_id().empty()) {                                        \
      if (ServicesRequired()) FAIL() << "Slurm test cluster: " << SlurmCluster::Get().why(); \
      GTEST_SKIP() << "Slurm test cluster: " << SlurmCluster::Get().why();             \
    }                                                                                  \
  } while (0)

}  // namespace tandem::backends::testing
