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
  uint64_t event = 0;
  auto write = [&] {
    std::vector<Action> actions = g.last;
    for (Action& a : actions) {
      if (auto* r = std::get_if<ResidencyRecord>(&a)) {
        const handoff::DeviceMemory reading = r->devices.empty() ? handoff::DeviceMemory{} : r->devices.front();
        r->devices.clear();
        for (int gpu : gpus.at(r->worker)) r->devices.push_back({gpu, reading.used, reading.total});
      }
    }
    ASSERT_TRUE((*writer)->WriteAll(actions, ++event).ok());
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
          g.Feed(handoff::Hello{.worker = hs::kJudge, .tag_sizes = hs::SizesOf(handoff::RoleKind::kTeacher), .at = g.Now()});
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
// length each time (the simulator itself is too slow for 10^5 lines; the
// time is replaced in the text, so each line stays as LogWriter wrote it).
inline void WriteLongRun(const std::filesystem::path& dir, size_t min_lines) {
  const std::filesystem::path seed = dir.string() + ".seed";
  WriteRun(seed, {.leak_in_train = true});
  struct Line {
    std::string before, after;  // the text around the time's value
    double t;
  };
  auto read = [](const std::filesystem::path& p, const char* key) {
    std::vector<Line> out;
    std::ifstream in(p);
    for (std::string text; std::getline(in, text);) {
      const double t = nlohmann::json::parse(text)[key].get<double>();
      const std::string k = std::string("\"") + key + "\":";
      const size_t at = text.find(k) + k.size();
      const size_t end = text.find_first_of(",}", at);
      out.push_back({text.substr(0, at), text.substr(end), t});
    }
    return out;
  };
  const auto handoff = read(seed / "handoff.jsonl", "start"), residency = read(seed / "residency.jsonl", "ts");
  std::filesystem::remove_all(seed);
  ASSERT_FALSE(handoff.empty());
  double first = handoff.front().t, last = first;
  for (const Line& l : handoff) last = std::max(last, l.t + 1.0);  // durations are at most 1 s here
  for (const Line& l : residency) last = std::max(last, l.t);
  const double period = last - first + 0.5;
  std::filesystem::create_directories(dir);
  std::ofstream h(dir / "handoff.jsonl"), r(dir / "residency.jsonl");
  size_t lines = 0;
  for (int k = 0; lines < min_lines; ++k) {
    for (const Line& l : handoff) h << l.before << fmt::format("{}", l.t + k * period) << l.after << "\n";
    for (const Line& l : residency) r << l.before << fmt::format("{}", l.t + k * period) << l.after << "\n";
    lines += handoff.size() + residency.size();
  }
}

}  // namespace tandem::report::testing
