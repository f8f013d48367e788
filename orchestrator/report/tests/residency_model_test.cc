// The residency model against logs written by the real LogWriter from the
// real transition function (run_fixture.h): who holds what at the end, the
// per-GPU peak and when, leaks, a dead worker, and torn or foreign lines.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>

#include "orchestrator/report/handoff_text.h"
#include "orchestrator/report/residency_model.h"
#include "orchestrator/report/tests/run_fixture.h"

namespace tandem::report::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("report_model_" + std::to_string(::getpid()) + "_" +
                                               ::testing::UnitTest::GetInstance()->current_test_info()->name());
  TempDir() { fs::remove_all(path); }
  ~TempDir() { fs::remove_all(path); }
};

RunLogs Read(const fs::path& dir) {
  auto logs = ReadRunLogs(dir.string());
  EXPECT_TRUE(logs.ok()) << logs.status().ToString();
  return logs.ok() ? *logs : RunLogs{};
}

const GpuResidency* Gpu(const ResidencyModel& m, int id) {
  for (const GpuResidency& g : m.gpus) if (g.gpu == id) return &g;
  return nullptr;
}

std::vector<std::string> Held(const GpuResidency& g) {
  std::vector<std::string> out;
  for (const Holding& h : g.holders) out.push_back(h.Worker() + " " + h.tag + " " + std::to_string(h.bytes));
  return out;
}

const auto kActorSizes = hs::SizesOf(handoff::RoleKind::kActor);
const auto kRolloutSizes = hs::SizesOf(handoff::RoleKind::kRollout);

TEST(ResidencyModel, AfterACycleTheRolloutHoldsEachGpuAndThePeakIsTraining) {
  TempDir t;
  WriteRun(t.path);
  RunLogs logs = Read(t.path);
  EXPECT_EQ(logs.skipped, 0u) << WarningsText(logs);
  ResidencyModel m = BuildResidencyModel(logs);
  ASSERT_EQ(m.gpus.size(), 2u);
  // The run ends in ROLLOUT: each rollout rank holds its weights, KV cache and graphs on its own GPU.
  EXPECT_THAT(Held(*Gpu(m, 0)), ElementsAre("rollout/0 weights 20", "rollout/0 kv_cache 30", "rollout/0 cuda_graph 5"));
  EXPECT_THAT(Held(*Gpu(m, 1)), ElementsAre("rollout/1 weights 20", "rollout/1 kv_cache 30", "rollout/1 cuda_graph 5"));
  EXPECT_EQ(Gpu(m, 0)->ledger_bytes, 55u);
  // The peak on both GPUs is the actor's training state, during TRAIN.
  const uint64_t train = kActorSizes.at(handoff::Tag::kParams) + kActorSizes.at(handoff::Tag::kGrads) +
                         kActorSizes.at(handoff::Tag::kOptimizer);
  for (int gpu : {0, 1}) {
    const GpuResidency& g = *Gpu(m, gpu);
    EXPECT_EQ(g.peak_bytes, train) << "gpu " << gpu;
    EXPECT_EQ(g.peak_phase, "TRAIN") << "gpu " << gpu;
    EXPECT_THAT(Held(GpuResidency{.holders = g.peak_holders}),
                ElementsAre("actor/0 params 20", "actor/0 grads 20", "actor/0 optimizer 30"));
    // The peak is the first time the sum reached it: the line that resumed the last of the three.
    double first = 0;
    uint64_t sum = 0;
    std::map<std::string, uint64_t> held;
    for (const ResidencyLine& l : logs.residency) {
      if (std::find(l.gpus.begin(), l.gpus.end(), gpu) == l.gpus.end()) continue;
      uint64_t& b = held[l.role + std::to_string(l.rank) + l.tag];
      sum = sum - b + l.bytes;
      b = l.bytes;
      if (sum == train && first == 0) first = l.ts;
    }
    EXPECT_DOUBLE_EQ(g.peak_ts, first);
    ASSERT_TRUE(g.reading.has_value());
    EXPECT_EQ(g.reading->total, 200u);
    EXPECT_TRUE(g.leaks.empty());
  }
  EXPECT_EQ(m.leaks, 0u);
  const std::string text = ResidencyText(m);
  EXPECT_THAT(text, HasSubstr("GPU 0"));
  EXPECT_THAT(text, HasSubstr("peak 70 B"));
  EXPECT_THAT(text, HasSubstr("(TRAIN)"));
  const nlohmann::json j = ResidencyJson(m);
  EXPECT_EQ(j["gpus"][1]["peak"]["bytes"], train);
  EXPECT_EQ(j["gpus"][0]["holders"].size(), 3u);
}

TEST(ResidencyModel, ReleasesThatKeepDeviceMemoryAreFlaggedAsLeaksOnEachGpu) {
  TempDir t;
  WriteRun(t.path, {.leak_in_train = true});
  RunLogs logs = Read(t.path);
  ResidencyModel m = BuildResidencyModel(logs);
  size_t leak_lines = 0;
  std::set<std::string> leaked;
  for (const ResidencyLine& l : logs.residency) {
    if (!l.leak) continue;
    leak_lines += l.gpus.size();
    leaked.insert(l.role + "/" + std::to_string(l.rank) + " " + l.tag);
  }
  ASSERT_GT(leak_lines, 0u) << "the fixture must produce leaks";
  EXPECT_EQ(m.leaks, leak_lines);
  EXPECT_TRUE(leaked.count("judge/0 weights")) << "the teacher's release before TRAIN leaked";
  // judge/0 is on both GPUs: each GPU shows its leak, with the ledger's words.
  for (int gpu : {0, 1}) {
    const GpuResidency& g = *Gpu(m, gpu);
    auto it = std::find_if(g.leaks.begin(), g.leaks.end(), [](const LeakMark& l) { return l.role == "judge"; });
    ASSERT_NE(it, g.leaks.end()) << "gpu " << gpu;
    EXPECT_EQ(it->delta, -25);
    EXPECT_THAT(it->note, HasSubstr("used fell by"));
  }
  EXPECT_THAT(ResidencyText(m), HasSubstr("LEAKS"));
}

TEST(ResidencyModel, ADeadWorkerHoldsNothing) {
  TempDir t;
  WriteRun(t.path, {.rollout_dies = true});
  ResidencyModel m = BuildResidencyModel(Read(t.path));
  EXPECT_THAT(Held(*Gpu(m, 0)), ElementsAre());
  EXPECT_EQ(Gpu(m, 0)->ledger_bytes, 0u);
  EXPECT_THAT(Held(*Gpu(m, 1)), ElementsAre("rollout/1 weights 20", "rollout/1 kv_cache 30", "rollout/1 cuda_graph 5"));
  EXPECT_THAT(ResidencyText(m), HasSubstr("nothing resident now"));
}

TEST(RunLogs, TornAndForeignLinesAreSkippedWithAWarning) {
  TempDir t;
  WriteRun(t.path);
  const ResidencyModel clean = BuildResidencyModel(Read(t.path));
  const size_t handoff_lines = Read(t.path).handoff.size();
  {
    // A newer tandem's line, a line missing a key, then a crash mid-write.
    std::ofstream h(t.path / "handoff.jsonl", std::ios::app);
    h << R"({"v":2,"group":"actor","phase":"TRAIN","what":"a future field"})" << "\n";
    h << R"({"v":1,"group":"actor","phase":"TRAIN","step":0})" << "\n";
    std::ofstream r(t.path / "residency.jsonl", std::ios::app);
    r << R"({"v":1,"group":"actor","ts":1764482999.0,"role":"rollout","rank":0,"gpus":[0],"tag":"weig)";
  }
  RunLogs logs = Read(t.path);
  EXPECT_EQ(logs.skipped, 3u);
  EXPECT_EQ(logs.handoff.size(), handoff_lines);
  const std::string w = WarningsText(logs);
  EXPECT_THAT(w, HasSubstr("handoff.jsonl:" + std::to_string(handoff_lines + 1) + ": skipped: line format version 2"));
  EXPECT_THAT(w, HasSubstr("\"stage\" missing"));
  EXPECT_THAT(w, HasSubstr("not JSON (torn line?) (last line, no newline)"));
  const ResidencyModel m = BuildResidencyModel(logs);
  EXPECT_EQ(ResidencyJson(m)["gpus"], ResidencyJson(clean)["gpus"]) << "skipped lines change nothing";
}

TEST(RunLogs, ARunDirWithoutLogsIsNotFound) {
  TempDir t;
  fs::create_directories(t.path);
  auto logs = ReadRunLogs(t.path.string());
  ASSERT_FALSE(logs.ok());
  EXPECT_EQ(logs.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(logs.status().message(), HasSubstr("no handoff.jsonl or residency.jsonl"));
  EXPECT_FALSE(ReadRunLogs((t.path / "nope").string()).ok());
}

TEST(PhaseSpans, ConsecutiveLinesOfAGroupMakeOnePhaseFromFirstStartToLastEnd) {
  TempDir t;
  WriteRun(t.path, {.cycles = 2});
  RunLogs logs = Read(t.path);
  const std::vector<PhaseSpan> spans = PhaseSpans(logs.handoff);
  std::vector<std::string> names;
  for (const PhaseSpan& s : spans) names.push_back(s.phase);
  EXPECT_THAT(names, ElementsAre("ROLLOUT", "TEACHER(0)", "TRAIN", "SYNC(1)", "ROLLOUT", "TEACHER(0)", "TRAIN",
                                 "SYNC(2)", "ROLLOUT"));
  size_t commands = 0;
  for (const PhaseSpan& s : spans) {
    commands += s.commands;
    EXPECT_LT(s.start, s.end);
    EXPECT_FALSE(s.failed);
    ASSERT_FALSE(s.steps.empty());
    EXPECT_DOUBLE_EQ(s.start, s.steps.front().start);
    for (size_t i = 1; i < s.steps.size(); ++i) EXPECT_GT(s.steps[i].step, s.steps[i - 1].step);
  }
  EXPECT_EQ(commands, logs.handoff.size());
  // SYNC publishes, has readers load and then frees the exports.
  std::vector<std::string> stages;
  for (const StepSpan& st : spans[3].steps) stages.push_back(st.stage);
  EXPECT_THAT(stages, ::testing::IsSupersetOf({"publish", "load_weights", "release_exports"}));
  const std::string text = HandoffLogText(logs);
  EXPECT_THAT(text, HasSubstr("== group actor: SYNC(1)"));
  EXPECT_THAT(text, HasSubstr("publish_weights v1"));
  EXPECT_THAT(text, HasSubstr("rollout/1"));
}

// The small run checked in for the docs (docs/cli.md shows its output) still
// reads cleanly. TANDEM_UPDATE_FIXTURES=1 rewrites it from the simulator.
TEST(CheckedInFixture, ReadsCleanlyAndShowsTwoGpusAndALeak) {
  const char* src = std::getenv("TANDEM_SOURCE_DIR");
  const fs::path dir = fs::path(src ? src : ".") / "orchestrator/report/tests/fixtures/small_run";
  if (std::getenv("TANDEM_UPDATE_FIXTURES")) {
    fs::remove(dir / "handoff.jsonl");
    fs::remove(dir / "residency.jsonl");
    WriteRun(dir, {.leak_in_train = true});
  }
  RunLogs logs = Read(dir);
  EXPECT_EQ(logs.skipped, 0u) << WarningsText(logs);
  ResidencyModel m = BuildResidencyModel(logs);
  EXPECT_EQ(m.gpus.size(), 2u);
  EXPECT_GT(m.leaks, 0u);
}

}  // namespace
}  // namespace tandem::report::testing
