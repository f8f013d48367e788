// Test support: a run directory whose handoff.jsonl and residency.jsonl are
// written by the real LogWriter from the real transition function, driven by
// the group simulator of the handoff tests (orchestrator/handoff/tests/
// group_sim.h). The group (owner "actor") spans two logical GPUs: actor/0
// and judge/0 on GPUs 0 and 1, rollout/0 on GPU 0, rollout/1 on GPU 1. Each
// device reading the simulator reports is written for every GPU of the
// worker. A cycle is ROLLOUT, TEACHER(0), TRAIN, SYNC(v); the run ends in
// ROLLOUT.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "orchestrator/handoff/log_writer.h"
#include "orchestrator/handoff/tests/group_sim.h"

namespace tandem::report::testing {

namespace hs = ::tandem::handoff::testing;
using handoff::Action;
using handoff::ResidencyRecord;

struct RunOptions {
  int cycles = 1;
  bool leak_in_train = false;   // releases on entering TRAIN keep their memory (not in the faulted TRAIN)
  bool rollout_dies = false;    // rollout/0 dies at the end
  bool fault_in_train = false;  // judge/0 dies while releasing for the first TRAIN, is restarted, says hello again
  double clock = 1764482000.0;  // the simulator's first timestamp
};

inline const handoff::WorkerId kRollout1{"rollout", 1};

// Writes the run's logs into `dir` (created). Returns the group for inspection.
inline void WriteRun(const std::filesystem::path& dir, RunOptions o = {}) {
  std::filesystem::create_directories(dir);
  handoff::LogContext ctx{
      .group = "actor",
      .allocator = {{"rollout", {{"PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"}}}},
      .gpus = {{hs::kActor, {0, 1}}, {hs::kJudge, {0, 1}}, {hs::kRollout, {0}}, {kRollout1, {1}}}};
  const auto gpus = ctx.gpus;
  auto writer = handoff::LogWriter::Open(dir.string(), std::move(ctx));
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  hs::Group g(hs::GroupOptions{.rollout_ranks = 2, .capacity = 200});
  g.clock = o.clock;
  auto write = [&] {
    for (Action a : g.last) {
      if (auto* r = std::get_if<ResidencyRecord>(&a)) {
        const handoff::DeviceMemory reading = r->devices.empty() ? handoff::DeviceMemory{} : r->devices.front();
        r->devices.clear();
        for (int gpu : gpus.at(r->worker)) r->devices.push_back({gpu, reading.used, reading.total});
      }
      ASSERT_TRUE((*writer)->WriteAll({a}).ok());
    }
  };
  auto enter = [&](handoff::Phase p) {
    g.Feed(handoff::RequestPhase{p, g.Now()});
    write();
    while (!g.pending.empty()) {
      g.AckNext();
      write();
    }
  };
  g.HelloAll();
  write();
  for (int c = 0; c < o.cycles; ++c) {
    enter(hs::Rollout());
    enter(hs::Teacher(0));
    g.leak_releases = o.leak_in_train && !(o.fault_in_train && c == 0);
    if (o.fault_in_train && c == 0) {
      g.Feed(handoff::RequestPhase{hs::Train(), g.Now()});
      write();
      while (!g.pending.empty()) {
        if (g.pending.front().worker == hs::kJudge && g.pending.front().kind == handoff::CommandKind::kRelease) {
          g.pending.pop_front();
          g.resident.erase(hs::kJudge);  // its memory went with the process
          g.Feed(handoff::WorkerDied{hs::kJudge, "killed by signal 9", g.Now()});
          write();
          g.Feed(handoff::Hello{hs::kJudge, hs::SizesOf(handoff::RoleKind::kTeacher), g.Now()});
          write();
          continue;
        }
        g.AckNext();
        write();
      }
    } else {
      enter(hs::Train());
    }
    g.leak_releases = false;
    g.device_extra = 0;
    enter(hs::Sync(c + 1));
  }
  enter(hs::Rollout());
  if (o.rollout_dies) {
    g.Feed(handoff::WorkerDied{hs::kRollout, "killed", g.Now()});
    write();
  }
}

// A long run of at least `min_lines` lines in all: the lines of a one-cycle
// run with a leak (WriteRun) repeated, their times shifted by the run's
// length each time (the simulator itself is too slow for 10^5 lines).
inline void WriteLongRun(const std::filesystem::path& dir, size_t min_lines) {
  const std::filesystem::path seed = dir.string() + ".seed";
  WriteRun(seed, {.leak_in_train = true});
  auto read = [](const std::filesystem::path& p) {
    std::vector<nlohmann::json> out;
    std::ifstream in(p);
    for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
    return out;
  };
  const auto handoff = read(seed / "handoff.jsonl"), residency = read(seed / "residency.jsonl");
  std::filesystem::remove_all(seed);
  ASSERT_FALSE(handoff.empty());
  double first = handoff.front()["start"].get<double>(), last = first;
  for (const auto& j : handoff) last = std::max(last, j["start"].get<double>() + j["duration"].get<double>());
  for (const auto& j : residency) last = std::max(last, j["ts"].get<double>());
  const double period = last - first + 0.5;
  std::filesystem::create_directories(dir);
  std::ofstream h(dir / "handoff.jsonl"), r(dir / "residency.jsonl");
  size_t lines = 0;
  for (int k = 0; lines < min_lines; ++k) {
    for (nlohmann::json j : handoff) {
      j["start"] = j["start"].get<double>() + k * period;
      h << j.dump() << "\n";
    }
    for (nlohmann::json j : residency) {
      j["ts"] = j["ts"].get<double>() + k * period;
      r << j.dump() << "\n";
    }
    lines += handoff.size() + residency.size();
  }
}

}  // namespace tandem::report::testing
