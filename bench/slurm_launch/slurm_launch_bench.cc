// Launch overhead of the Slurm backend (issue #5 item 7; docs/benchmarks.md,
// "Slurm launch"): N trivial tasks (`true`) started at once as job steps of
// one allocation through SlurmExecutor, next to N plain `srun --overlap true`
// started at once from bash, on the same allocation. Prints one line per N
// with both wall times and their ratio.
//
//   . /tmp/tandem-services/slurm.env
//   build/bin/slurm_launch_bench [N...]        (default: 1 10 50 200)
#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>

#include "backends/slurm/slurm_cli.h"
#include "backends/slurm/slurm_executor.h"
#include "backends/task_env.h"

using namespace tandem;
using namespace tandem::backends;
using Clock = std::chrono::steady_clock;

namespace {

std::string SubmitAllocation() {
  auto r = slurm::RunCommand({"sbatch", "--parsable", "--job-name=tandem-bench", "--output=/dev/null",
                              "--ntasks=1", "--time=15", "--chdir=/tmp", "--wrap=sleep 1200"});
  if (!r.ok() || !r->ok()) return "";
  std::string id = r->out.substr(0, r->out.find_first_of(";\n"));
  for (int i = 0; i < 300; ++i) {
    auto q = slurm::RunCommand({"squeue", "--noheader", "--jobs=" + id, "--format=%T"});
    if (q.ok() && q->out.rfind("RUNNING", 0) == 0) return id;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return "";
}

double ViaBackend(SlurmExecutor& ex, boost::asio::io_context& io, std::map<std::string, TaskExit>& exits,
                  const std::filesystem::path& dir, int n, int round) {
  exits.clear();
  auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    LaunchRequest r;
    r.job_id = "bench";
    r.task_id = "bench." + std::to_string(round) + "." + std::to_string(i);
    r.argv = {"true"};
    TaskEnvInput in;
    in.job_id = r.job_id;
    in.task_id = r.task_id;
    in.role = "bench";
    r.env = BuildTaskEnvironment(in);
    r.cwd = dir;
    r.stdout_path = dir / (r.task_id + ".out");
    r.stderr_path = dir / (r.task_id + ".err");
    r.exit_path = dir / (r.task_id + ".exit.json");
    auto ref = ex.Start(r);
    if (!ref.ok()) {
      std::fprintf(stderr, "start: %s\n", ref.status().ToString().c_str());
      return -1;
    }
  }
  while (static_cast<int>(exits.size()) < n) {
    io.restart();
    io.run_one_for(std::chrono::milliseconds(5));
    if (Clock::now() - t0 > std::chrono::minutes(5)) return -1;
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double PlainSrun(const std::string& job, int n) {
  std::string script = "for i in $(seq " + std::to_string(n) + "); do srun --jobid=" + job +
                       " --overlap --gres=none --ntasks=1 --quiet true & done; wait";
  auto t0 = Clock::now();
  auto r = slurm::RunCommand({"bash", "-c", script}, std::chrono::minutes(5));
  if (!r.ok()) return -1;
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> counts;
  for (int i = 1; i < argc; ++i) counts.push_back(std::atoi(argv[i]));
  if (counts.empty()) counts = {1, 10, 50, 200};
  std::string job = SubmitAllocation();
  if (job.empty()) {
    std::fprintf(stderr, "slurm_launch_bench: no allocation (is the cluster up? SLURM_CONF set?)\n");
    return 1;
  }
  auto dir = std::filesystem::temp_directory_path() / ("tandem-slurm-bench-" + job);
  std::filesystem::create_directories(dir);
  boost::asio::io_context io;
  std::map<std::string, TaskExit> exits;
  SlurmExecutorOptions o;
  o.job_id = job;
  const char* bin = std::getenv("TANDEM_BIN_DIR");
  if (bin) o.exec_shim = std::string(bin) + "/tandem-exec";
  auto ex = SlurmExecutor::Create(io, [&](const std::string& id, const TaskExit& x) { exits[id] = x; }, o);
  if (!ex.ok()) {
    std::fprintf(stderr, "slurm_launch_bench: %s\n", ex.status().ToString().c_str());
    (void)slurm::RunCommand({"scancel", job});
    return 1;
  }
  std::printf("%6s %12s %12s %7s\n", "tasks", "tandem_s", "srun_s", "ratio");
  int round = 0;
  for (int n : counts) {
    double plain = PlainSrun(job, n);
    double ours = ViaBackend(**ex, io, exits, dir, n, round++);
    int failed = 0;
    for (auto& [id, x] : exits) {
      if (!x.succeeded() && failed++ == 0) {
        std::string log;
        std::ifstream in(dir / (id + ".exit.json.srun.log"));
        std::getline(in, log);
        std::fprintf(stderr, "first failure %s: %s srun: %s\n", id.c_str(), x.ToJson().dump().c_str(),
                     log.c_str());
      }
    }
    std::printf("%6d %12.3f %12.3f %7.2f%s\n", n, ours, plain, plain > 0 ? ours / plain : 0.0,
                failed ? (" (" + std::to_string(failed) + " failed)").c_str() : "");
    std::fflush(stdout);
  }
  (void)slurm::RunCommand({"scancel", job});
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return 0;
}
