// The timeline page rendered by headless Chromium (Debian's `chromium`,
// installed by scripts/setup.sh --test): the DOM after the page's own
// JavaScript ran is compared with what this test computes from the log
// itself. Every bar is a hold (a tag resident on a GPU from the line that
// made it resident or changed its size until the line that released it or
// changed its size); phase and step marks follow phases.h; leak marks are
// one per leak line and GPU; failed commands are marked. A large log
// (~10^5 lines) is drawn within the page's limits, says so, and loses no
// hold (merged bars count what they merge). A missing chromium is a failure.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>

#include <fmt/format.h>

#include "orchestrator/report/phases.h"
#include "orchestrator/report/run_logs.h"
#include "orchestrator/report/tests/run_fixture.h"
#include "tests/daemon/daemon_process.h"

namespace tandem::report::testing {
namespace {

namespace fs = std::filesystem;
using ::tandem::testing::BinDir;
using ::tandem::testing::MakeTempDir;
using Attrs = std::map<std::string, std::string>;

std::string Chromium() {
  if (const char* c = std::getenv("TANDEM_CHROMIUM")) return c;
  for (const char* name : {"chromium", "chromium-browser"}) {
    for (const char* dir : {"/usr/bin", "/usr/local/bin", "/bin"}) {
      fs::path p = fs::path(dir) / name;
      if (fs::exists(p)) return p.string();
    }
  }
  return "";
}

std::string Slurp(const std::string& cmd, int* rc) {
  FILE* pipe = ::popen(cmd.c_str(), "r");
  std::string out;
  if (!pipe) return out;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  const int st = ::pclose(pipe);
  *rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

// The DOM after the page's scripts ran.
std::string RenderedDom(const fs::path& tmp, const fs::path& page) {
  const std::string chromium = Chromium();
  EXPECT_FALSE(chromium.empty()) << "chromium not found: run scripts/setup.sh --test (Debian package chromium)";
  if (chromium.empty()) return "";
  int rc = 0;
  std::string dom = Slurp(fmt::format("timeout 90 '{}' --headless --no-sandbox --disable-gpu --no-first-run "
                                      "--disable-extensions --user-data-dir='{}' --dump-dom 'file://{}' 2>'{}'",
                                      chromium, (tmp / "profile").string(), page.string(), (tmp / "chromium.err").string()),
                          &rc);
  EXPECT_EQ(rc, 0) << ::tandem::testing::ReadFile(tmp / "chromium.err");
  return dom;
}

// The <rect class="CLS" ...> elements of the drawing (inside <div
// id="chart">, not the script's source text), as attribute maps.
std::vector<Attrs> Rects(const std::string& page_dom, const std::string& cls) {
  std::vector<Attrs> out;
  const size_t chart = page_dom.find("<div id=\"chart\">");
  EXPECT_NE(chart, std::string::npos);
  if (chart == std::string::npos) return out;
  const std::string dom = page_dom.substr(chart, page_dom.find("</svg>", chart) - chart);
  const std::string open = "<rect ";
  for (size_t at = dom.find(open); at != std::string::npos; at = dom.find(open, at + 1)) {
    const size_t end = dom.find('>', at);
    if (end == std::string::npos) break;
    Attrs a;
    size_t i = at + open.size();
    while (i < end) {
      const size_t eq = dom.find("=\"", i);
      if (eq == std::string::npos || eq > end) break;
      const size_t close = dom.find('"', eq + 2);
      std::string name = dom.substr(i, eq - i);
      name.erase(0, name.find_first_not_of(' '));
      a[name] = dom.substr(eq + 2, close - eq - 2);
      i = close + 1;
    }
    if (a["class"] == cls) out.push_back(std::move(a));
  }
  return out;
}

std::string Num(const std::string& s) { return fmt::format("{:.6f}", std::stod(s)); }
std::string Num(double d) { return fmt::format("{:.6f}", d); }

struct Hold {
  int gpu;
  std::string role, group;
  int rank;
  std::string tag;
  uint64_t bytes;
  double start, end = 0;
  bool leak = false, open = false;
  std::string Key() const {
    return fmt::format("gpu{} {}/{} {} {} {}..{} leak={} open={}", gpu, role, rank, tag, bytes, Num(start), Num(end),
                       leak, open);
  }
};

// Holds from the log, the test's own way.
std::vector<Hold> HoldsOf(const RunLogs& logs) {
  std::vector<ResidencyLine> lines = logs.residency;
  std::stable_sort(lines.begin(), lines.end(), [](const auto& a, const auto& b) { return a.ts < b.ts; });
  double end = 0;
  for (const auto& l : lines) end = std::max(end, l.ts);
  for (const auto& h : logs.handoff) end = std::max(end, h.start + h.duration);
  std::map<std::string, Hold> open;
  std::vector<Hold> out;
  for (const ResidencyLine& l : lines) {
    for (int gpu : l.gpus) {
      const std::string key = fmt::format("{}|{}|{}|{}", gpu, l.role, l.rank, l.tag);
      auto it = open.find(key);
      if (it != open.end() && it->second.bytes == l.bytes) continue;
      if (it != open.end()) {
        it->second.end = l.ts;
        it->second.leak = l.leak;
        out.push_back(it->second);
        open.erase(it);
      }
      if (l.bytes > 0) open.emplace(key, Hold{gpu, l.role, l.group, l.rank, l.tag, l.bytes, l.ts});
    }
  }
  for (auto& [k, h] : open) {
    h.end = end;
    h.open = true;
    out.push_back(h);
  }
  return out;
}

std::multiset<std::string> Keys(const std::vector<Hold>& holds) {
  std::multiset<std::string> out;
  for (const Hold& h : holds) out.insert(h.Key());
  return out;
}

fs::path WriteTimeline(const fs::path& tmp, const fs::path& run, std::vector<std::string> extra = {}) {
  const fs::path page = tmp / "timeline.html";
  std::string cmd = fmt::format("'{}' timeline '{}' -o '{}'", (BinDir() / "tandem").string(), run.string(), page.string());
  for (const auto& e : extra) cmd += " " + e;
  EXPECT_EQ(std::system((cmd + " >/dev/null").c_str()), 0) << cmd;
  return page;
}

class TimelineInChromium : public ::testing::Test {
 protected:
  void SetUp() override { tmp_ = MakeTempDir("report-timeline"); }
  void TearDown() override { fs::remove_all(tmp_); }
  fs::path tmp_;
};

TEST_F(TimelineInChromium, EveryHoldPhaseStepLeakAndFaultOfTheLogIsDrawn) {
  const fs::path run = tmp_ / "run";
  WriteRun(run, {.cycles = 2, .leak_in_train = true, .fault_in_train = true});
  auto logs = ReadRunLogs(run.string());
  ASSERT_TRUE(logs.ok());
  const std::string dom = RenderedDom(tmp_, WriteTimeline(tmp_, run));
  ASSERT_FALSE(dom.empty());

  // Bars: one per hold, per GPU, with its role, tag, bytes and times.
  const std::vector<Hold> want = HoldsOf(*logs);
  std::vector<Hold> got;
  std::map<int, size_t> want_per_gpu, got_per_gpu;
  for (const Hold& h : want) want_per_gpu[h.gpu]++;
  for (const Attrs& a : Rects(dom, "bar")) {
    EXPECT_EQ(a.at("data-merged"), "1");
    got.push_back(Hold{std::stoi(a.at("data-gpu")), a.at("data-role"), a.at("data-group"), std::stoi(a.at("data-rank")),
                       a.at("data-tag"), std::stoull(a.at("data-bytes")), std::stod(a.at("data-start")),
                       std::stod(a.at("data-end")), a.at("data-leak") == "1", a.at("data-open") == "1"});
    got_per_gpu[got.back().gpu]++;
  }
  EXPECT_EQ(got_per_gpu, want_per_gpu);
  EXPECT_EQ(Keys(got), Keys(want));
  EXPECT_EQ(want_per_gpu.size(), 2u);

  // Phases and steps: the spans of phases.h, computed again by the page.
  const std::vector<PhaseSpan> spans = PhaseSpans(logs->handoff);
  std::multiset<std::string> want_phases, got_phases, want_steps, got_steps;
  for (const PhaseSpan& p : spans) {
    want_phases.insert(fmt::format("{} {} {}..{} {} {}", p.group, p.phase, Num(p.start), Num(p.end), p.commands, p.failed ? 1 : 0));
    for (const StepSpan& s : p.steps) {
      want_steps.insert(fmt::format("{} {} {} {}..{}", p.phase, s.step, s.stage, Num(s.start), Num(s.end)));
    }
  }
  for (const Attrs& a : Rects(dom, "phase")) {
    got_phases.insert(fmt::format("{} {} {}..{} {} {}", a.at("data-group"), a.at("data-phase"), Num(a.at("data-start")),
                                  Num(a.at("data-end")), a.at("data-commands"), a.at("data-failed")));
  }
  for (const Attrs& a : Rects(dom, "step")) {
    got_steps.insert(fmt::format("{} {} {} {}..{}", a.at("data-phase"), a.at("data-step"), a.at("data-stage"),
                                 Num(a.at("data-start")), Num(a.at("data-end"))));
  }
  EXPECT_EQ(got_phases, want_phases);
  EXPECT_EQ(got_steps, want_steps);
  EXPECT_GE(spans.size(), 9u);

  // Leaks: one mark per leak line and GPU; the bar the leaky release ended is outlined.
  size_t leak_marks = 0, failed = 0;
  for (const ResidencyLine& l : logs->residency) leak_marks += l.leak ? l.gpus.size() : 0;
  for (const HandoffLine& h : logs->handoff) failed += h.outcome != "ok";
  EXPECT_GT(leak_marks, 0u);
  EXPECT_EQ(Rects(dom, "leak").size(), leak_marks);
  EXPECT_GT(failed, 0u) << "the fixture kills judge/0 mid-handoff";
  EXPECT_EQ(Rects(dom, "fault").size(), failed);
  // Nothing merged or left out, so no note says so.
  EXPECT_EQ(dom.find("data-kind=\"aggregated\""), std::string::npos);
  EXPECT_EQ(dom.find("data-kind=\"truncated\""), std::string::npos);
  // Hover text: bytes and duration on every bar.
  EXPECT_NE(dom.find("<title>rollout/1 kv_cache on GPU 1 (group actor)\n30 B\n"), std::string::npos);
}

TEST_F(TimelineInChromium, ALargeLogIsDrawnWithinLimitsSaysSoAndLosesNoHold) {
  const fs::path run = tmp_ / "big";
  WriteLongRun(run, 100000);
  auto logs = ReadRunLogs(run.string());
  ASSERT_TRUE(logs.ok());
  const size_t lines = logs->handoff.size() + logs->residency.size();
  EXPECT_GE(lines, 100000u);
  const auto t0 = std::chrono::steady_clock::now();  // from here: what a user waits for
  const std::string dom = RenderedDom(tmp_, WriteTimeline(tmp_, run, {"--max-bars", "2000"}));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(dom.empty());
  // About 5 s on an idle 2-core machine; the bound leaves room for a busy one.
  EXPECT_LT(seconds, 60) << "writing and rendering " << lines << " lines";
  const std::vector<Attrs> bars = Rects(dom, "bar");
  EXPECT_LE(bars.size(), 2000u);
  EXPECT_GT(bars.size(), 0u);
  size_t merged = 0;
  for (const Attrs& a : bars) merged += std::stoul(a.at("data-merged"));
  EXPECT_EQ(merged, HoldsOf(*logs).size()) << "every hold is inside some bar";
  EXPECT_NE(dom.find("data-kind=\"aggregated\""), std::string::npos) << "the page says it merged";
  EXPECT_LE(Rects(dom, "step").size(), 5000u);
  const std::vector<Attrs> phases = Rects(dom, "phase");
  EXPECT_LE(phases.size(), 5000u);
  size_t phase_count = 0;
  for (const Attrs& a : phases) phase_count += std::stoul(a.at("data-merged"));
  EXPECT_EQ(phase_count, PhaseSpans(logs->handoff).size()) << "every phase is inside some mark";
  EXPECT_NE(dom.find("data-kind=\"truncated\""), std::string::npos) << "steps are too many to draw; the page says so";
}

}  // namespace
}  // namespace tandem::report::testing
