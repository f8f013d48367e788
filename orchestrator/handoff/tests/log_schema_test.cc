// The lines LogWriter writes for a real handoff (a full cycle, a leak, a
// worker death and its recovery) validate against schemas/handoff.schema.json
// and schemas/residency.schema.json with ajv (tests/schema/validate.js), and
// a line missing a required key does not. Missing node or ajv is a failure:
// scripts/setup.sh --test installs them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "orchestrator/handoff/log_writer.h"
#include "orchestrator/handoff/tests/group_sim.h"

namespace tandem::handoff::testing {
namespace {

namespace fs = std::filesystem;

fs::path SourceDir() {
  const char* dir = std::getenv("TANDEM_SOURCE_DIR");
  return dir ? fs::path(dir) : fs::current_path();
}

std::vector<std::string> Lines(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// file -> ajv verdict line.
std::map<std::string, nlohmann::json> Validate(const std::string& schema, const std::vector<fs::path>& files) {
  std::string cmd = "node '" + (SourceDir() / "tests/schema/validate.js").string() + "' '" +
                    (SourceDir() / "schemas" / schema).string() + "'";
  for (const auto& f : files) cmd += " '" + f.string() + "'";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::map<std::string, nlohmann::json> out;
  if (!pipe) return out;
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) text.append(buf, n);
  EXPECT_EQ(pclose(pipe), 0) << "validator failed; run scripts/setup.sh --test (node, ajv)";
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("file")) out[j["file"].get<std::string>()] = j;
  }
  return out;
}

// Writes each line to its own file (validate.js takes one document per file).
std::vector<fs::path> Split(const fs::path& jsonl, const fs::path& dir) {
  std::vector<fs::path> out;
  int i = 0;
  for (const std::string& line : Lines(jsonl)) {
    fs::path p = dir / (jsonl.stem().string() + "_" + std::to_string(i++) + ".json");
    std::ofstream(p) << line;
    out.push_back(p);
  }
  return out;
}

TEST(HandoffLogs, EveryEmittedLineMatchesItsSchema) {
  const fs::path dir = fs::temp_directory_path() / ("handoff_logs_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "lines");
  {
    LogContext ctx{.group = "actor",
                   .allocator = {{"rollout", AllocatorConfig({{"PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"},
                                                              {"HOME", "/root"}})}},
                   .gpus = {{kRollout, {0}}}};
    auto writer = LogWriter::Open(dir.string(), std::move(ctx));
    ASSERT_TRUE(writer.ok()) << writer.status().ToString();
    Group g;
    uint64_t event = 0;
    g.HelloAll();
    auto enter = [&](Phase p) {
      g.Feed(RequestPhase{p, g.Now()});
      ASSERT_TRUE((*writer)->WriteAll(g.last, ++event).ok());
      while (!g.pending.empty()) {
        g.AckNext();
        ASSERT_TRUE((*writer)->WriteAll(g.last, ++event).ok());
      }
    };
    enter(Rollout());
    enter(Teacher(0));
    g.leak_releases = true;  // the teacher's release will not lower used memory: a leak
    enter(Train());
    g.leak_releases = false;
    g.device_extra = 0;
    enter(Sync(1));
    enter(Rollout());
    g.Feed(WorkerDied{kRollout, "killed", g.Now()});
    ASSERT_TRUE((*writer)->WriteAll(g.last, ++event).ok());
  }
  const auto handoff = Split(dir / "handoff.jsonl", dir / "lines");
  const auto residency = Split(dir / "residency.jsonl", dir / "lines");
  ASSERT_GE(handoff.size(), 20u);
  ASSERT_GE(residency.size(), 10u);
  for (const auto& [schema, files] : {std::pair{"handoff.schema.json", handoff}, {"residency.schema.json", residency}}) {
    auto verdicts = Validate(schema, files);
    ASSERT_EQ(verdicts.size(), files.size()) << schema;
    for (const auto& [file, v] : verdicts) EXPECT_TRUE(v["valid"].get<bool>()) << file << ": " << v.dump();
  }
  // What a user reads in them.
  bool leak = false, allocator = false, died = false;
  for (const std::string& line : Lines(dir / "residency.jsonl")) {
    auto j = nlohmann::json::parse(line);
    leak = leak || j["leak"].get<bool>();
    died = died || j.value("note", "") == "worker died";
    allocator = allocator || (j["role"] == "rollout" &&
                              j["allocator"] == nlohmann::json{{"PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"}});
  }
  EXPECT_TRUE(leak) << "the leaked release is flagged";
  EXPECT_TRUE(died);
  EXPECT_TRUE(allocator) << "the rollout's allocator config (and nothing else of its env) is on its lines";

  // The schemas do refuse a broken line.
  auto j = nlohmann::json::parse(Lines(dir / "handoff.jsonl").front());
  j.erase("outcome");
  std::ofstream(dir / "lines/broken.json") << j.dump();
  auto broken = Validate("handoff.schema.json", {dir / "lines/broken.json"});
  ASSERT_EQ(broken.size(), 1u);
  EXPECT_FALSE(broken.begin()->second["valid"].get<bool>());
  fs::remove_all(dir);
}


// A daemon killed after journaling an event but before writing its lines
// replays the journal into a new writer: the missing lines are added, and
// the lines already written are not written twice.
TEST(HandoffLogs, AReopenedWriterAddsOnlyTheEventsNotYetLogged) {
  const fs::path dir = fs::temp_directory_path() / ("handoff_logs_reopen_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  Group g;
  std::vector<std::vector<Action>> events;  // what the journal would replay
  g.HelloAll();
  events.push_back(g.last);
  g.Feed(RequestPhase{Rollout(), g.Now()});
  events.push_back(g.last);
  while (!g.pending.empty()) {
    g.AckNext();
    events.push_back(g.last);
  }
  ASSERT_GE(events.size(), 4u);
  const LogContext ctx{.group = "actor", .allocator = {}, .gpus = {{kRollout, {0}}}};
  auto lines = [&] { return Lines(dir / "handoff.jsonl").size() + Lines(dir / "residency.jsonl").size(); };
  // Live: every event but the last was logged; the handoff lines of the one
  // before it were lost too (a kill between the two files' writes).
  {
    auto w = LogWriter::Open(dir.string(), ctx);
    ASSERT_TRUE(w.ok());
    for (size_t i = 0; i + 1 < events.size(); ++i) {
      std::vector<Action> only_residency;
      for (const Action& a : events[i]) {
        if (i + 2 < events.size() || std::holds_alternative<ResidencyRecord>(a)) only_residency.push_back(a);
      }
      ASSERT_TRUE((*w)->WriteAll(only_residency, i + 1).ok());
    }
  }
  const size_t lines_before = lines();
  // Replay into a new writer: every event again.
  {
    auto w = LogWriter::Open(dir.string(), ctx);
    ASSERT_TRUE(w.ok());
    for (size_t i = 0; i < events.size(); ++i) ASSERT_TRUE((*w)->WriteAll(events[i], i + 1).ok());
  }
  // Each event's lines exactly once, as one uninterrupted writer would have written them.
  const fs::path clean = dir / "clean";
  fs::create_directories(clean);
  {
    auto w = LogWriter::Open(clean.string(), ctx);
    ASSERT_TRUE(w.ok());
    for (size_t i = 0; i < events.size(); ++i) ASSERT_TRUE((*w)->WriteAll(events[i], i + 1).ok());
  }
  EXPECT_EQ(Lines(dir / "handoff.jsonl"), Lines(clean / "handoff.jsonl"));
  EXPECT_EQ(Lines(dir / "residency.jsonl"), Lines(clean / "residency.jsonl"));
  EXPECT_LT(lines_before, lines()) << "the lost lines were added";
  fs::remove_all(dir);
}

// A long job's log: the group's last line lies far from the end, behind
// other groups' lines and a line cut short. The reopened writer finds it
// (reading backwards, block by block), skips what is logged, and starts its
// lines on a fresh line.
TEST(HandoffLogs, AReopenedWriterFindsTheGroupsLastEventBehindOtherLines) {
  const fs::path dir = fs::temp_directory_path() / ("handoff_logs_tail_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    std::ofstream out(dir / "residency.jsonl");
    for (int e = 1; e <= 700; ++e) {
      out << R"({"group":"actor","event":)" << e << R"(,"pad":")" << std::string(100, 'a') << "\"}\n";
    }
    for (int e = 1; e <= 3000; ++e) {
      out << R"({"group":"judge","event":)" << e << R"(,"pad":")" << std::string(100, 'j') << "\"}\n";
    }
    out << R"({"group":"actor","event":99)";  // cut short: no newline, not JSON
  }
  ASSERT_GT(fs::file_size(dir / "residency.jsonl"), 256u * 1024) << "several read blocks";
  const LogContext ctx{.group = "actor", .allocator = {}, .gpus = {{kRollout, {0}}}};
  const std::vector<Action> change = {
      ResidencyRecord{.at = 1, .worker = kRollout, .tag = Tag::kWeights, .bytes = 5, .delta = 5}};
  {
    auto w = LogWriter::Open(dir.string(), ctx);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    ASSERT_TRUE((*w)->WriteAll(change, 700).ok());  // logged already
    ASSERT_TRUE((*w)->WriteAll(change, 701).ok());
  }
  std::vector<uint64_t> actor_events;
  for (const auto& l : Lines(dir / "residency.jsonl")) {
    auto j = nlohmann::json::parse(l, nullptr, false);
    if (j.is_object() && j["group"] == "actor") actor_events.push_back(j["event"].get<uint64_t>());
  }
  ASSERT_EQ(actor_events.size(), 701u) << "the cut line is skipped, event 700 not written twice";
  EXPECT_EQ(actor_events.back(), 701u);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tandem::handoff::testing
