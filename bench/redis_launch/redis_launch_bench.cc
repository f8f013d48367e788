// bench/redis_launch: placement and launch of 1 -> 500 tasks across 4 agents
// with the redis backend, next to the local backend in the same run (issue #6
// part 6; results in docs/benchmarks.md "Redis").
//
// Both backends run the same trivial task (`true`) through their Executor:
//   local  LocalExecutor in this process (tandem-exec shim, posix_spawn);
//   redis  RedisExecutor in this process, 4 real `tandem-agent` processes on
//          this machine and the test Redis (scripts/services/redis.sh).
// For a batch of N, all N Start() calls go out back to back; per task the
// latency is from the batch's start to its exit callback (placement, signed
// command, agent launch, exit report). Printed: Start() calls/s (placement
// and queueing), p50/p99 latency, tasks/s (N over the time to the last exit).
// Usage: redis_launch_bench [--max N] [--agents A]
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "backends/local/local_executor.h"
#include "backends/redis/tests/redis_test_util.h"
#include "common/log.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace tandem;
using namespace tandem::backends;
namespace bt = tandem::backends::testing;

struct Result {
  double starts_per_s = 0, p50_ms = 0, p99_ms = 0, tasks_per_s = 0;
  int failed = 0;
};

double Pct(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

StatusOr<Result> RunBatch(boost::asio::io_context& io, Executor& exec, std::map<std::string, Clock::time_point>& ends,
                          const std::filesystem::path& dir, const std::string& tag, int n) {
  ends.clear();
  std::vector<std::string> ids;
  const auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    LaunchRequest r;
    r.job_id = "bench";
    r.task_id = tag + "." + std::to_string(n) + "." + std::to_string(i);
    r.argv = {"true"};
    r.env = {"PATH=/usr/bin:/bin"};
    r.cwd = dir;
    r.stdout_path = dir / (r.task_id + ".out");
    r.stderr_path = dir / (r.task_id + ".err");
    r.exit_path = dir / (r.task_id + ".exit");
    TANDEM_ASSIGN_OR_RETURN(auto ref, exec.Start(r), "start");
    (void)ref;
    ids.push_back(r.task_id);
    io.poll();
  }
  const auto started = Clock::now();
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  while (ends.size() < ids.size() && Clock::now() < deadline) {
    io.restart();
    io.run_one_for(std::chrono::milliseconds(20));
  }
  if (ends.size() < ids.size()) return DeadlineExceeded(std::to_string(ids.size() - ends.size()) + " tasks did not end");
  Result res;
  std::vector<double> lat;
  auto last = t0;
  for (auto& [id, t] : ends) {
    lat.push_back(std::chrono::duration<double, std::milli>(t - t0).count());
    last = std::max(last, t);
  }
  res.starts_per_s = n / std::max(1e-9, std::chrono::duration<double>(started - t0).count());
  res.p50_ms = Pct(lat, 0.5);
  res.p99_ms = Pct(lat, 0.99);
  res.tasks_per_s = n / std::max(1e-9, std::chrono::duration<double>(last - t0).count());
  for (auto& f : std::filesystem::directory_iterator(dir)) std::filesystem::remove(f.path());
  return res;
}

}  // namespace

int main(int argc, char** argv) {
  int max_n = 500, agents = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--max")) max_n = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--agents")) agents = std::atoi(argv[i + 1]);
  }
  log::Init("warn");
  if (!tandem::backends::testing::RedisReachable()) {
    std::cerr << "redis_launch_bench: the test Redis is not running (scripts/services/redis.sh start)\n";
    return 1;
  }
  const auto dir = std::filesystem::temp_directory_path() / ("tandem-redis-bench-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "tasks");
  tandem::backends::testing::RedisCluster cluster;
  cluster.prefix = tandem::backends::testing::UniquePrefix("bench");
  if (auto st = cluster.Up(agents, 3.0, dir.string()); !st.ok()) {
    std::cerr << "redis_launch_bench: " << st.ToString() << "\n";
    return 1;
  }
  boost::asio::io_context io;
  std::map<std::string, Clock::time_point> ends;
  auto on_exit = [&](const std::string& id, const TaskExit&) { ends[id] = Clock::now(); };
  auto local = LocalExecutor::Create(io, on_exit, {});
  auto redis = tandem::backends::testing::MakeRedisExecutor(io, on_exit, cluster.prefix);
  if (!local.ok() || !redis.ok()) {
    std::cerr << "redis_launch_bench: " << (local.ok() ? redis.status() : local.status()).ToString() << "\n";
    return 1;
  }
  std::printf("| N | backend | Start() calls/s | p50 ms | p99 ms | tasks/s |\n|---|---|---|---|---|---|\n");
  for (int n : {1, 10, 100, 500}) {
    if (n > max_n) break;
    for (auto [name, exec] : {std::pair<const char*, Executor*>{"local", local->get()},
                              std::pair<const char*, Executor*>{"redis", redis->get()}}) {
      auto r = RunBatch(io, *exec, ends, dir / "tasks", name, n);
      if (!r.ok()) {
        std::printf("| %d | %s | failed: %s |\n", n, name, r.status().ToString().c_str());
        continue;
      }
      std::printf("| %d | %s (%d agents) | %.0f | %.1f | %.1f | %.0f |\n", n, name, std::strcmp(name, "redis") ? 0 : agents,
                  r->starts_per_s, r->p50_ms, r->p99_ms, r->tasks_per_s);
      std::fflush(stdout);
    }
  }
  redis->reset();
  for (auto& a : cluster.agents) a->Stop();
  std::filesystem::remove_all(dir);
  return 0;
}
