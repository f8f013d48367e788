// The run-dir readers on what a task can write into its own handoff.jsonl and
// residency.jsonl (issue #12 point 1): every bad line is skipped with a
// warning and nothing throws, from reading through every view built on the
// lines (the residency model and its JSON, the handoff text, the timeline).
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "orchestrator/report/handoff_text.h"
#include "orchestrator/report/residency_model.h"
#include "orchestrator/report/rl_metrics.h"
#include "orchestrator/report/run_logs.h"
#include "orchestrator/report/timeline.h"

namespace tandem::report {
namespace {

namespace fs = std::filesystem;

const char* const kHandoff =
    R"({"v":1,"group":"g","phase":"ROLLOUT","step":0,"stage":"release_inference","role":"rollout","rank":0,)"
    R"("gpus":[0],"command":"release","tag":"kv_cache","bytes":2097152,"start":1700000000.5,"duration":0.01,"outcome":"ok"})";
const char* const kResidency =
    R"({"v":1,"group":"g","ts":1700000000.6,"role":"rollout","rank":0,"gpus":[0],"tag":"kv_cache","bytes":0,)"
    R"("delta":-2097152,"devices":[{"gpu":0,"used":1048576,"total":8589934592}],"leak":false})";

// Lines a hostile task might write: each must be skipped.
std::vector<std::string> HostileLines() {
  std::vector<std::string> lines = {
      "[1,2,3]", "\"text\"", "7", "null", "{}", R"({"v":"1"})", R"({"v":1,"group":7})",
      R"({"v":1,"group":"g","phase":"ROLLOUT","step":99999999999,"stage":"s","role":"r","rank":0,"gpus":[0],)"
      R"("command":"c","tag":null,"bytes":1,"start":1,"duration":1,"outcome":"ok"})",
      R"({"v":1,"group":"g","ts":1,"role":"r","rank":0,"gpus":[4294967296],"tag":"t","bytes":1,"delta":1,)"
      R"("devices":[],"leak":false})",
      R"({"v":1,"group":"g","ts":1,"role":"r","rank":0,"gpus":[0],"tag":"t","bytes":1,"delta":1,)"
      R"("devices":[7, {"gpu":"x"}],"leak":false})",
      R"({"v":1,"group":"g","phase":"P","step":0,"stage":"s","role":"r","rank":0,"gpus":[0],)"
      R"("command":"c","tag":null,"bytes":1,"start":1e300,"duration":1,"outcome":"ok"})",
      std::string("{\"v\":1,\"group\":\"\xff\xfe\"}"),
      "{\"v\":1,\"x\":" + std::string(100000, '[') + std::string(100000, ']') + "}",
      "{\"v\":1,\"x\":\"" + std::string(3 << 20, 'a') + "\"}",
  };
  return lines;
}

class HostileRunLogsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tandem-hostile-logs-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Write(const char* name, const std::string& good) {
    std::ofstream out(dir_ / name, std::ios::binary);
    for (const auto& l : HostileLines()) out << l << "\n";
    out << good << "\n";
    out << "{\"v\":1,\"group\":";  // torn last line
  }
  fs::path dir_;
};

TEST_F(HostileRunLogsTest, SkipsEveryBadLineAndKeepsTheGoodOnes) {
  Write("handoff.jsonl", kHandoff);
  Write("residency.jsonl", kResidency);
  auto logs = ReadRunLogs(dir_.string());
  ASSERT_TRUE(logs.ok()) << logs.status().ToString();
  EXPECT_EQ(logs->handoff.size(), 1u);
  EXPECT_EQ(logs->residency.size(), 1u);
  EXPECT_EQ(logs->skipped, 2 * (HostileLines().size() + 1));
  const std::string warnings = WarningsText(*logs);
  EXPECT_NE(warnings.find("nested deeper than 64 levels"), std::string::npos) << warnings;
  EXPECT_NE(warnings.find("line over 1048576 bytes"), std::string::npos) << warnings;
  // Every view of the lines works, and its JSON is valid UTF-8.
  const ResidencyModel m = BuildResidencyModel(*logs);
  EXPECT_NO_THROW((void)ResidencyJson(m).dump());
  EXPECT_NO_THROW((void)ResidencyText(m));
  EXPECT_NO_THROW((void)HandoffLogText(*logs));
  EXPECT_NO_THROW((void)TimelineHtml(*logs));
}

// A task may also replace a log by a FIFO or a symlink to /dev/zero: the
// readers refuse it at once instead of waiting on it or reading forever.
TEST_F(HostileRunLogsTest, AFifoOrASymlinkIsRefusedNotReadForever) {
  ASSERT_EQ(::mkfifo((dir_ / "handoff.jsonl").c_str(), 0600), 0);
  auto logs = ReadRunLogs(dir_.string());
  ASSERT_FALSE(logs.ok());
  EXPECT_NE(logs.status().message().find("FIFO"), std::string::npos) << logs.status().ToString();
  fs::remove(dir_ / "handoff.jsonl");
  fs::create_symlink("/dev/zero", dir_ / "residency.jsonl");
  logs = ReadRunLogs(dir_.string());
  EXPECT_FALSE(logs.ok()) << "a symlink to /dev/zero was read";
  fs::create_symlink("/dev/zero", dir_ / "metrics.jsonl");
  EXPECT_EQ(ReadRlMetrics((dir_ / "metrics.jsonl").string()).status().code(), StatusCode::kFailedPrecondition);
}

TEST(HostileRunLogLineTest, OutOfRangeIntegersAreRefusedNotTruncated) {
  auto l = ParseHandoffLine(
      R"({"v":1,"group":"g","phase":"P","step":4294967297,"stage":"s","role":"r","rank":0,"gpus":[0],)"
      R"("command":"c","tag":null,"bytes":1,"start":1,"duration":1,"outcome":"ok"})");
  EXPECT_FALSE(l.ok());
  auto r = ParseResidencyLine(
      R"({"v":1,"group":"g","ts":1,"role":"r","rank":-1,"gpus":[2147483648],"tag":"t","bytes":1,"delta":1,)"
      R"("devices":[],"leak":false})");
  EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace tandem::report
