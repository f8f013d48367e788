// bench/launch: how fast tandemd turns a submitted job into running tasks
// (docs/benchmarks.md, "Task launch").
//
// For N in {1, 10, 100, 1000} trivial tasks (`true`), in one process and one
// run:
//   floor   posix_spawn of the same command from this program: per-spawn
//           latency and spawns/s (spawn all, then reap all);
//   tandem  an embedded daemon (the same code as tandemd) on a private state
//           dir: a job of N replicas is submitted and each task's
//           submit->running latency is taken from its "running" event;
//   tandem+1GiB  the same with 1 GiB of touched memory in the daemon, which
//           would slow a fork()-based launcher and must not slow ours.
// Prints p50/p99 latency, tasks/s and the ratios to the floor, ratios last.
// Usage: launch_bench [--max N] [--reps R]
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <vector>

#include "common/log.h"
#include "orchestrator/daemon/daemon.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct Result {
  double p50_us = 0, p99_us = 0, tasks_per_s = 0;
};

double Pct(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

Result Floor(int n) {
  std::vector<double> lat;
  std::vector<pid_t> pids;
  char* argv[] = {const_cast<char*>("/bin/true"), nullptr};
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
  const auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    pid_t pid;
    if (posix_spawn(&pid, argv[0], nullptr, &attr, argv, environ) != 0) { std::perror("posix_spawn"); continue; }
    // Like tandem's figure: from the batch's request to this process existing.
    lat.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    pids.push_back(pid);
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  for (pid_t p : pids) waitpid(p, nullptr, 0);
  posix_spawnattr_destroy(&attr);
  return {Pct(lat, 0.5), Pct(lat, 0.99), n / secs};
}

Result Tandem(int n) {
  namespace fs = std::filesystem;
  std::string tmpl = (fs::temp_directory_path() / "tandem-bench-XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) { std::perror("mkdtemp"); return {}; }
  tandem::daemon::DaemonSettings s;
  s.state_dir = tmpl;
  s.socket = tmpl + "/tandemd.sock";
  s.gpus = "none";
  s.log_level = "warn";
  boost::asio::io_context io;
  Result r;
  {
    tandem::daemon::Daemon d(io, s);
    if (auto st = d.Start(); !st.ok()) { std::cerr << st.ToString() << "\n"; return {}; }
    nlohmann::ordered_json spec = {{"name", "bench"}, {"backend", {{"kind", "local"}}},
                 {"roles", {{"t", {{"command", {"true"}}, {"replicas", n}}}}}};
    std::vector<double> lat;
    Clock::time_point t0, last;
    std::string job_id;
    d.jobs().Subscribe([&](const tandem::daemon::Event& ev) {
      const json& b = ev.body;
      if (b.value("type", "") == "task_state" && b.value("state", "") == "running") {
        last = Clock::now();
        lat.push_back(std::chrono::duration<double, std::micro>(last - t0).count());
      }
      if (b.value("type", "") == "job_state" && (b.value("state", "") == "succeeded" || b.value("state", "") == "failed")) {
        if (b.value("state", "") != "succeeded") std::cerr << "bench job failed: " << b.dump() << "\n";
        io.stop();
      }
    });
    t0 = Clock::now();
    d.jobs().Submit(spec, [](tandem::StatusOr<json> res) {
      if (!res.ok()) std::cerr << "submit: " << res.status().ToString() << "\n";
    });
    io.run();
    const double secs = std::chrono::duration<double>(last - t0).count();
    r = {Pct(lat, 0.5), Pct(lat, 0.99), lat.size() / std::max(secs, 1e-9)};
    d.Stop();
  }
  fs::remove_all(tmpl);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int max_n = 1000, reps = 3;
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--max")) max_n = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
  }
  tandem::log::Init("warn");
  std::vector<int> ns;
  for (int n = 1; n <= max_n; n *= 10) ns.push_back(n);
  std::map<std::string, std::map<int, Result>> best;
  auto keep = [&](const std::string& k, int n, Result r) {
    auto& b = best[k][n];
    if (b.tasks_per_s == 0 || r.p50_us < b.p50_us) b.p50_us = r.p50_us, b.p99_us = r.p99_us;
    b.tasks_per_s = std::max(b.tasks_per_s, r.tasks_per_s);
  };
  std::vector<char> ballast;
  for (int phase = 0; phase < 2; ++phase) {
    if (phase == 1) {
      ballast.assign(size_t{1} << 30, 1);  // 1 GiB, touched
      for (size_t i = 0; i < ballast.size(); i += 4096) ballast[i] = static_cast<char>(i);
    }
    for (int n : ns)
      for (int rep = 0; rep < reps; ++rep) {
        keep(phase ? "floor+1GiB" : "floor", n, Floor(n));
        keep(phase ? "tandem+1GiB" : "tandem", n, Tandem(n));
      }
  }
  std::printf("%-12s %6s %10s %10s %10s\n", "what", "tasks", "p50_us", "p99_us", "tasks/s");
  for (const auto& [k, m] : best)
    for (const auto& [n, r] : m) std::printf("%-12s %6d %10.1f %10.1f %10.0f\n", k.c_str(), n, r.p50_us, r.p99_us, r.tasks_per_s);
  std::printf("\nratios (tandem / floor, same run; targets: p50 <= 2x the floor's, >= 2000 tasks/s, flat in RSS)\n");
  for (int n : ns) {
    const auto &f = best["floor"][n], &t = best["tandem"][n], &t1 = best["tandem+1GiB"][n];
    std::printf("N=%-5d p50 %.2fx floor   tasks/s %.0f (%.2fx floor)   1GiB RSS: p50 %.2fx, tasks/s %.2fx\n", n,
                t.p50_us / f.p50_us, t.tasks_per_s, t.tasks_per_s / f.tasks_per_s,
                t1.p50_us / t.p50_us, t1.tasks_per_s / t.tasks_per_s);
  }
  return 0;
}
