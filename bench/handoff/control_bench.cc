// bench/handoff/control_bench: the control overhead of the GPU handoff
// (issue #3 part 9; docs/benchmarks.md "handoff control overhead").
//
// An embedded daemon (the same code as tandemd) runs a colocated job of N
// real `tandem-worker probe` processes whose tags are 4 KiB (they move no
// bytes worth counting): 1 actor and N-1 rollouts. The bench enters the
// phases ROLLOUT -> TRAIN -> SYNC(v) -> ROLLOUT ... through the handoff
// service (the code behind POST /v1/jobs/{id}/phase, without HTTP) and times
// each transition: every stage's commands over the control socket, the
// workers' answers, the journal append and the log lines.
// Baseline in the same run: one bare round trip of a JSON line of the same
// size over a unix socket to another process.
// Floor in the same run: one round trip to each of k echo processes in
// parallel (a stage's commands), summed over the stages a cycle runs (read
// back from handoff.jsonl).
//   control_bench [--min N] [--max N] [--cycles K]
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "orchestrator/daemon/daemon.h"

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The floor of one stage at this machine: the same JSON line written to each
// of `n` echo processes in one go, then every answer read (poll over all n
// sockets), as the daemon does with a stage's commands; n = 1 is the bare
// round trip. Median over `reps` (0 when a round fails).
double ParallelRoundTripUs(int n, int reps) {
  std::vector<int> fds;
  std::vector<pid_t> kids;
  for (int i = 0; i < n; ++i) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) break;
    const pid_t child = ::fork();
    if (child == 0) {
      ::close(sv[0]);
      for (int fd : fds) ::close(fd);
      char buf[4096];
      for (;;) {
        ssize_t got = ::read(sv[1], buf, sizeof buf);
        if (got <= 0) ::_exit(0);
        if (::write(sv[1], buf, static_cast<size_t>(got)) != got) ::_exit(1);
      }
    }
    ::close(sv[1]);
    fds.push_back(sv[0]);
    kids.push_back(child);
  }
  const std::string line =
      json{{"type", "release"}, {"id", 4294967297}, {"tags", {"weights", "kv_cache"}}, {"phase", "TRAIN"},
           {"residency", {{"tags", {{"weights", 4096}, {"kv_cache", 4096}}}}}}.dump() + "\n";
  std::vector<double> us;
  std::vector<pollfd> pfds(fds.size());
  std::vector<size_t> got(fds.size());
  char buf[4096];
  // One round of the stage; false when a write, poll or read fails.
  auto round = [&] {
    for (int fd : fds) {
      if (::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return false;
    }
    std::fill(got.begin(), got.end(), 0);
    size_t done = 0;
    while (done < fds.size()) {
      size_t k = 0;
      for (size_t i = 0; i < fds.size(); ++i) {
        if (got[i] < line.size()) pfds[k++] = {fds[i], POLLIN, 0};
      }
      if (::poll(pfds.data(), k, 5000) <= 0) return false;
      for (size_t j = 0; j < k; ++j) {
        if (!(pfds[j].revents & POLLIN)) continue;
        const size_t i = static_cast<size_t>(std::find(fds.begin(), fds.end(), pfds[j].fd) - fds.begin());
        const ssize_t m = ::read(fds[i], buf, sizeof buf);
        if (m <= 0) return false;
        got[i] += static_cast<size_t>(m);
        if (got[i] >= line.size()) ++done;
      }
    }
    return true;
  };
  for (int r = 0; r < reps && static_cast<int>(fds.size()) == n; ++r) {
    const auto t0 = Clock::now();
    if (!round()) {
      us.clear();
      break;
    }
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  for (int fd : fds) ::close(fd);  // the echo processes read EOF and exit
  for (pid_t k : kids) ::waitpid(k, nullptr, 0);
  return Median(us);
}

// One cycle's stages from handoff.jsonl (lines after `since`): per (phase
// kind, step) the number of distinct workers commanded, and the time spent
// inside stages (first command sent -> last answer in, per the daemon's
// clock), per cycle.
struct Stages {
  std::vector<int> sizes;
  double in_stages_us = 0;  // per cycle
};
Stages ReadStages(const fs::path& handoff_jsonl, double since, int cycles) {
  std::map<std::pair<std::string, int>, std::set<std::string>> steps;
  std::map<std::tuple<std::string, int, double>, double> spans;  // (phase, step, sent) -> last answer
  std::ifstream in(handoff_jsonl);
  std::string text;
  while (std::getline(in, text)) {
    const json l = json::parse(text, nullptr, false);
    if (!l.is_object() || l.value("start", 0.0) < since) continue;
    std::string phase = l.value("phase", "");
    const double start = l.value("start", 0.0);
    double& end = spans[{phase, l.value("step", 0), start}];
    end = std::max(end, start + l.value("duration", 0.0));
    phase = phase.substr(0, phase.find('('));
    steps[{phase, l.value("step", 0)}].insert(l.value("role", "") + "." + std::to_string(l.value("rank", 0)));
  }
  Stages out;
  for (const auto& [key, workers] : steps) out.sizes.push_back(static_cast<int>(workers.size()));
  for (const auto& [key, end] : spans) out.in_stages_us += (end - std::get<2>(key)) * 1e6;
  out.in_stages_us /= std::max(1, cycles);
  return out;
}

struct Result {
  std::map<std::string, double> median_us;  // per phase entered
  double cycle_us = 0;                      // ROLLOUT->TRAIN->SYNC->ROLLOUT, median
  Stages stages;                            // one cycle's, from handoff.jsonl
  bool ok = false;
};

Result Run(int n, int cycles) {
  std::string tmpl = (fs::temp_directory_path() / "tandem-control-bench-XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) return {};
  tandem::daemon::DaemonSettings s;
  s.state_dir = tmpl;
  s.socket = tmpl + "/tandemd.sock";
  const int gpus = std::max(1, n - 1);
  for (int g = 0; g < gpus; ++g) s.gpus += (g ? "," : "") + std::to_string(g);
  s.log_level = "warn";
  boost::asio::io_context io;
  Result r;
  {
    tandem::daemon::Daemon d(io, s);
    if (auto st = d.Start(); !st.ok()) {
      std::cerr << st.ToString() << "\n";
      return {};
    }
    const std::vector<std::string> common = {"--backend", "cpu", "--cpu-capacity", "1GiB", "--start-released"};
    auto args = [&](std::vector<std::string> tags) {
      std::vector<std::string> a;
      for (auto& t : tags) a.insert(a.end(), {"--tag", t});
      a.insert(a.end(), common.begin(), common.end());
      return a;
    };
    nlohmann::ordered_json roles;
    roles["actor"] = {{"worker", "probe"}, {"args", args({"params=4KiB:backup", "grads=4KiB", "optimizer=4KiB:backup"})},
                      {"replicas", 1}, {"gpus_per_replica", gpus}};
    if (n > 1) {
      roles["rollout"] = {{"worker", "probe"}, {"args", args({"weights=4KiB:backup", "kv_cache=4KiB", "cuda_graph=4KiB:backup"})},
                          {"replicas", n - 1}, {"gpus_per_replica", 1}, {"colocate_with", "actor"}};
    }
    nlohmann::ordered_json spec = {{"name", "control-bench"}, {"backend", {{"kind", "local"}}}, {"roles", roles},
                                   {"handoff", {{"roles", {{"actor", "actor"}, {"rollout", "rollout"}}}}}};
    if (n == 1) spec["handoff"]["roles"] = {{"actor", "actor"}};
    std::string job;
    d.jobs().Submit(spec, [&](tandem::StatusOr<json> res) {
      if (!res.ok()) std::cerr << "submit: " << res.status().ToString() << "\n";
      else job = res->value("id", "");
    });
    // The phase sequence, each timed; the first ROLLOUT is warm-up.
    std::vector<std::pair<std::string, int64_t>> plan;
    plan.push_back({"rollout", 0});
    for (int c = 1; c <= cycles; ++c) plan.insert(plan.end(), {{"train", 0}, {"sync", c}, {"rollout", 0}});
    std::map<std::string, std::vector<double>> times;
    std::vector<double> cycle;
    size_t next = 0;
    double cycle_acc = 0;
    double measured_from = 0;  // wall clock (as the logs' "start") after the warm-up
    std::function<void()> step = [&] {
      if (next == plan.size()) {
        r.ok = true;
        return io.stop();
      }
      const auto [phase, version] = plan[next];
      const auto t0 = Clock::now();
      d.handoff().RequestPhase(job, "", phase, version, [&, phase, t0](tandem::StatusOr<json> res) {
        if (!res.ok()) {
          std::cerr << "phase " << phase << ": " << res.status().ToString() << "\n";
          return io.stop();
        }
        const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        if (next > 0) {
          times[phase].push_back(us);
          cycle_acc += us;
          if (phase == "rollout") {
            cycle.push_back(cycle_acc);
            cycle_acc = 0;
          }
        }
        if (next == 0) measured_from = tandem::daemon::HandoffGroup::Now();
        ++next;
        boost::asio::post(io, step);
      });
    };
    // Start once every worker said hello (a request waits for hellos anyway,
    // but the first transition should not include process start-up).
    boost::asio::steady_timer poll(io);
    std::function<void(boost::system::error_code)> wait_ready = [&](boost::system::error_code) {
      auto res = job.empty() ? tandem::StatusOr<json>(tandem::NotFound("")) : d.handoff().Residency(job);
      int hello = 0;
      if (res.ok()) {
        for (const auto& g : (*res)["groups"])
          for (const auto& w : g["workers"]) hello += w.value("hello", false) && w.value("connected", false);
      }
      if (hello == n) return step();
      poll.expires_after(std::chrono::milliseconds(20));
      poll.async_wait(wait_ready);
    };
    poll.expires_after(std::chrono::milliseconds(20));
    poll.async_wait(wait_ready);
    boost::asio::steady_timer deadline(io, std::chrono::seconds(120));
    deadline.async_wait([&](boost::system::error_code ec) {
      if (!ec) {
        std::cerr << "n=" << n << ": timed out\n";
        io.stop();
      }
    });
    io.run();
    for (const auto& [p, v] : times) r.median_us[p] = Median(v);
    r.cycle_us = Median(cycle);
    if (const auto* j = d.jobs().Find(job); j && r.ok) r.stages = ReadStages(fs::path(j->run_dir) / "handoff.jsonl", measured_from, cycles);
    if (!job.empty()) (void)d.jobs().Cancel(job);
    io.restart();
    io.run_for(std::chrono::seconds(5));  // SIGTERM to the workers, reaped
    d.Stop();
  }
  if (!std::getenv("CONTROL_BENCH_KEEP")) fs::remove_all(tmpl);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int min_n = 1, max_n = 64, cycles = 20;
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--min")) min_n = std::max(1, std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--max")) max_n = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--cycles")) cycles = std::atoi(argv[i + 1]);
  }
  tandem::log::Init("warn");
  const double rtt = ParallelRoundTripUs(1, 2000);  // the bare round trip
  std::cout << fmt::format("bare round trip (unix socket, one JSON line, to another process): {:.1f} us\n", rtt);
  // The floor of a stage of k workers: one round trip to each of k echo
  // processes in parallel (cached per k).
  std::map<int, double> parallel;
  auto parallel_us = [&](int k) {
    if (!parallel.count(k)) parallel[k] = ParallelRoundTripUs(k, 500);
    return parallel[k];
  };
  // in_stages: per transition, the time from a stage's commands leaving to
  // its last answer, summed over the stages (daemon clock, handoff.jsonl);
  // the rest of the transition is the daemon between stages.
  std::cout << "workers  rollout_us  train_us  sync_us  cycle_us  per_transition_us  transition/rtt  stages/cycle"
               "  in_stages_us  floor_us  transition/floor\n";
  std::map<int, double> per_transition;
  for (int n = min_n; n <= max_n; n *= 2) {
    Result r = Run(n, cycles);
    if (!r.ok) {
      std::cout << fmt::format("{:7d}  failed\n", n);
      continue;
    }
    per_transition[n] = r.cycle_us / 3;
    // The floor of a transition: its stages one after the other, each one
    // parallel round trip to the workers it commands.
    double floor = 0;
    for (int k : r.stages.sizes) floor += parallel_us(k);
    floor /= 3;
    std::cout << fmt::format("{:7d}  {:10.0f}  {:8.0f}  {:7.0f}  {:8.0f}  {:17.0f}  {:14.1f}  {:12d}  {:12.0f}  {:8.0f}  {:16.1f}\n",
                             n, r.median_us["rollout"], r.median_us["train"], r.median_us["sync"], r.cycle_us,
                             r.cycle_us / 3, r.cycle_us / 3 / rtt, r.stages.sizes.size(), r.stages.in_stages_us / 3, floor,
                             floor > 0 ? r.cycle_us / 3 / floor : 0.0);
  }
  std::cout << "parallel round trip to k echo processes (the floor of one stage of k workers):";
  for (int k = 1; k <= max_n; k *= 2) std::cout << fmt::format(" k={}: {:.0f} us", k, parallel_us(k));
  std::cout << "\n";
  if (per_transition.count(8)) {
    std::cout << fmt::format("verdict: {:.3f} ms per transition at 8 workers (target <= 1 ms): {}\n",
                             per_transition[8] / 1000, per_transition[8] <= 1000 ? "met" : "NOT met");
  }
  if (per_transition.count(min_n) && per_transition.count(max_n) && max_n > min_n) {
    std::cout << fmt::format("scaling: {}x the workers cost {:.1f}x the time per transition\n", max_n / min_n,
                             per_transition[max_n] / per_transition[min_n]);
  }
  return 0;
}
