// The Prometheus registry behind GET /metrics (registry.h): exact exposition
// text, escaping, histogram bucket semantics, name checks, and — as a user's
// scraper would — the official Python client's parser reading our output.
#include "orchestrator/metrics/registry.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <fstream>
#include <limits>
#include <sstream>

namespace tandem::metrics {
namespace {

template <typename T>
T* Ok(StatusOr<T*> s) {
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : nullptr;
}

TEST(Registry, RendersTheExpositionFormat) {
  Registry r;
  auto* jobs = Ok(r.AddGauge("tandem_jobs", "Jobs by state.", {"state"}));
  jobs->WithLabels({"running"}).Set(2);
  jobs->WithLabels({"pending"}).Set(1);
  auto* launches = Ok(r.AddCounter("tandem_task_launches_total", "Tasks launched."));
  launches->Get().Inc();
  launches->Get().Inc(2);
  auto* lat = Ok(r.AddHistogram("tandem_launch_latency_seconds", "Submit to running.", {0.25, 1, 2}, {"backend"}));
  lat->WithLabels({"local"}).Observe(0.25);  // a bound is inclusive
  lat->WithLabels({"local"}).Observe(0.5);
  lat->WithLabels({"local"}).Observe(4);
  EXPECT_EQ(r.Render(),
            "# HELP tandem_jobs Jobs by state.\n"
            "# TYPE tandem_jobs gauge\n"
            "tandem_jobs{state=\"pending\"} 1\n"
            "tandem_jobs{state=\"running\"} 2\n"
            "# HELP tandem_task_launches_total Tasks launched.\n"
            "# TYPE tandem_task_launches_total counter\n"
            "tandem_task_launches_total 3\n"
            "# HELP tandem_launch_latency_seconds Submit to running.\n"
            "# TYPE tandem_launch_latency_seconds histogram\n"
            "tandem_launch_latency_seconds_bucket{backend=\"local\",le=\"0.25\"} 1\n"
            "tandem_launch_latency_seconds_bucket{backend=\"local\",le=\"1\"} 2\n"
            "tandem_launch_latency_seconds_bucket{backend=\"local\",le=\"2\"} 2\n"
            "tandem_launch_latency_seconds_bucket{backend=\"local\",le=\"+Inf\"} 3\n"
            "tandem_launch_latency_seconds_sum{backend=\"local\"} 4.75\n"
            "tandem_launch_latency_seconds_count{backend=\"local\"} 3\n");
}

TEST(Registry, LabelLessMetricsShowZeroFromTheStart) {
  Registry r;
  Ok(r.AddCounter("c_total", "c"));
  Ok(r.AddHistogram("h", "h", {1}));
  Ok(r.AddGauge("g", "g", {"x"}));  // labelled: no series until one is used
  EXPECT_EQ(r.Render(),
            "# HELP c_total c\n# TYPE c_total counter\nc_total 0\n"
            "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"1\"} 0\nh_bucket{le=\"+Inf\"} 0\nh_sum 0\nh_count 0\n"
            "# HELP g g\n# TYPE g gauge\n");
}

TEST(Registry, EscapesLabelValuesAndHelp) {
  Registry r;
  auto* g = Ok(r.AddGauge("g", "line one\nback\\slash \"quoted\"", {"path"}));
  g->WithLabels({"a\"b\\c\nd"}).Set(1);
  g->WithLabels({"caf\xC3\xA9"}).Set(2);      // valid UTF-8 stays
  g->WithLabels({"bad\xFF\xC3(end"}).Set(3);  // invalid bytes become U+FFFD
  std::string out = r.Render();
  EXPECT_NE(out.find("# HELP g line one\\nback\\\\slash \"quoted\"\n"), std::string::npos) << out;
  EXPECT_NE(out.find("g{path=\"a\\\"b\\\\c\\nd\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("g{path=\"caf\xC3\xA9\"} 2\n"), std::string::npos) << out;
  EXPECT_NE(out.find("g{path=\"bad\xEF\xBF\xBD\xEF\xBF\xBD(end\"} 3\n"), std::string::npos) << out;
}

TEST(Registry, FormatsSpecialAndLargeValues) {
  EXPECT_EQ(text::FormatValue(std::numeric_limits<double>::quiet_NaN()), "NaN");
  EXPECT_EQ(text::FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(text::FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(text::FormatValue(0.1), "0.1");
  EXPECT_EQ(text::FormatValue(-3), "-3");
  EXPECT_EQ(std::stod(text::FormatValue(1e21)), 1e21);
  EXPECT_EQ(std::stod(text::FormatValue(123456789.125)), 123456789.125);
}

TEST(Registry, CountersOnlyGoUp) {
  Counter c;
  c.Inc(2);
  c.Inc(-1);
  c.Inc(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(c.value(), 2);
  Gauge g;
  g.Inc(3);
  g.Dec(5);
  EXPECT_EQ(g.value(), -2);
}

TEST(Registry, HistogramBuckets) {
  Histogram h({1, 2, 4});
  for (double v : {0.0, 1.0, 1.5, 2.0, 3.0, 100.0}) h.Observe(v);
  EXPECT_EQ(h.CumulativeCounts(), (std::vector<uint64_t>{2, 4, 5, 6}));
  EXPECT_EQ(h.count(), 6u);
  EXPECT_EQ(h.sum(), 107.5);
  EXPECT_EQ(LinearBuckets(1, 2, 3), (std::vector<double>{1, 3, 5}));
  EXPECT_EQ(ExponentialBuckets(0.001, 10, 4), (std::vector<double>{0.001, 0.01, 0.1, 1}));
}

TEST(Registry, RejectsBadNamesAndCollisions) {
  Registry r;
  EXPECT_EQ(r.AddCounter("", "x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.AddCounter("1abc", "x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.AddCounter("a-b", "x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.AddGauge("g", "x", {"__reserved"}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.AddGauge("g", "x", {"a:b"}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.AddGauge("g", "x", {"a", "a"}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.AddHistogram("h", "x", {1}, {"le"}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.AddHistogram("h", "x", {2, 1}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.AddHistogram("h", "x", {1, std::nan("")}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(r.AddCounter("ns:ok_total", "x").ok());
  EXPECT_TRUE(r.AddHistogram("lat", "x", {1, std::numeric_limits<double>::infinity()}).ok());
  EXPECT_EQ(r.AddGauge("ns:ok_total", "x").status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(r.AddCounter("lat_count", "x").status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(r.AddGauge("lat", "x").status().code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE(r.AddGauge("lat_counts", "x").ok());
}

TEST(Registry, WrongLabelCountIsFittedNotFatal) {
  Registry r;
  auto* g = Ok(r.AddGauge("g", "x", {"a", "b"}));
  g->WithLabels({"only"}).Set(1);
  g->WithLabels({"1", "2", "3"}).Set(2);
  std::string out = r.Render();
  EXPECT_NE(out.find("g{a=\"only\",b=\"\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("g{a=\"1\",b=\"2\"} 2\n"), std::string::npos) << out;
}

TEST(Registry, SeriesBeyondTheLimitCountAsOther) {
  Registry r;
  auto* c = Ok(r.AddCounter("reqs", "x", {"method"}));
  for (size_t i = 0; i < Family<Counter>::kMaxSeries + 500; ++i) c->WithLabels({"m" + std::to_string(i)}).Inc();
  EXPECT_EQ(c->size(), Family<Counter>::kMaxSeries + 1);  // the limit, plus "other"
  EXPECT_NE(r.Render().find("reqs{method=\"other\"} 500\n"), std::string::npos);
  // Series that exist keep counting under their own labels.
  c->WithLabels({"m0"}).Inc();
  EXPECT_NE(r.Render().find("reqs{method=\"m0\"} 2\n"), std::string::npos);
}

TEST(Registry, RemovedSeriesDisappear) {
  Registry r;
  auto* g = Ok(r.AddGauge("job_tasks", "x", {"job"}));
  g->WithLabels({"j1"}).Set(1);
  g->WithLabels({"j2"}).Set(2);
  g->Remove({"j1"});
  EXPECT_EQ(g->size(), 1u);
  EXPECT_EQ(r.Render().find("j1"), std::string::npos);
}

// A hand-written checker of the exposition grammar (std::regex trips a GCC 12
// false warning under -Werror).
bool TakeName(std::string_view* s, bool colon) {
  size_t i = 0;
  while (i < s->size()) {
    char c = (*s)[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':') ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) break;
    ++i;
  }
  s->remove_prefix(i);
  return i > 0;
}

bool TakeEscaped(std::string_view* s, bool quotes) {  // up to the end or an unescaped quote
  while (!s->empty() && !(quotes && s->front() == '"')) {
    char c = s->front();
    if (c == '\n') return false;
    if (c == '\\') {
      if (s->size() < 2) return false;
      char e = (*s)[1];
      if (!(e == '\\' || e == 'n' || (quotes && e == '"'))) return false;
      s->remove_prefix(2);
    } else {
      s->remove_prefix(1);
    }
  }
  return true;
}

bool IsValue(std::string_view v) {
  if (v == "+Inf" || v == "-Inf" || v == "NaN") return true;
  if (v.empty()) return false;
  char* end = nullptr;
  std::string copy(v);
  std::strtod(copy.c_str(), &end);
  return end == copy.c_str() + copy.size() && copy.find_first_of("in") == std::string::npos;
}

bool IsCommentLine(std::string_view s) {
  if (s.substr(0, 7) == "# HELP ") {
    s.remove_prefix(7);
    if (!TakeName(&s, true) || s.empty() || s.front() != ' ') return false;
    s.remove_prefix(1);
    return TakeEscaped(&s, false) && s.empty();
  }
  if (s.substr(0, 7) == "# TYPE ") {
    s.remove_prefix(7);
    if (!TakeName(&s, true) || s.empty() || s.front() != ' ') return false;
    s.remove_prefix(1);
    return s == "counter" || s == "gauge" || s == "histogram";
  }
  return false;
}

bool IsSampleLine(std::string_view s) {
  if (!TakeName(&s, true)) return false;
  if (!s.empty() && s.front() == '{') {
    s.remove_prefix(1);
    for (bool first = true;; first = false) {
      if (!first) {
        if (s.empty() || s.front() != ',') return false;
        s.remove_prefix(1);
      }
      if (!TakeName(&s, false) || s.substr(0, 2) != "=\"") return false;
      s.remove_prefix(2);
      if (!TakeEscaped(&s, true) || s.empty()) return false;
      s.remove_prefix(1);  // closing quote
      if (!s.empty() && s.front() == '}') break;
    }
    s.remove_prefix(1);
  }
  if (s.empty() || s.front() != ' ') return false;
  s.remove_prefix(1);
  return IsValue(s);
}

// Every line is a comment of the two kinds or a sample, per the format's grammar.
TEST(Registry, EveryLineMatchesTheGrammar) {
  Registry r;
  Ok(r.AddGauge("a", "x\ny", {"l"}))->WithLabels({"\"\\\n"}).Set(std::nan(""));
  Ok(r.AddHistogram("b_seconds", "x", ExponentialBuckets(0.001, 2, 12), {"role", "rank"}))
      ->WithLabels({"actor", "0"})
      .Observe(0.3);
  Ok(r.AddCounter("c_total", ""))->Get().Inc(1e300);
  std::istringstream in(r.Render());
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    EXPECT_TRUE(IsCommentLine(line) || IsSampleLine(line)) << "line " << n << ": " << line;
  }
  EXPECT_GT(n, 15);
  // The checker itself rejects broken lines.
  EXPECT_FALSE(IsSampleLine("a{b=\"x} 1"));
  EXPECT_FALSE(IsSampleLine("a{b=\"x\\q\"} 1"));
  EXPECT_FALSE(IsSampleLine("a 1 2"));
  EXPECT_FALSE(IsCommentLine("# TYPE a summary"));
}

// The reference parser (prometheus_client, Debian python3-prometheus-client,
// installed by scripts/setup.sh --test) reads back what we render.
TEST(Registry, OfficialPythonParserReadsOurOutput) {
  if (std::system("/usr/bin/python3 -c 'import prometheus_client' >/dev/null 2>&1") != 0) {
    if (std::getenv("CI")) FAIL() << "python3-prometheus-client is missing (scripts/setup.sh --test installs it)";
    GTEST_SKIP() << "python3-prometheus-client not installed";
  }
  Registry r;
  auto* jobs = Ok(r.AddGauge("tandem_jobs", "Jobs by state.\nSecond line \\ here", {"state", "name"}));
  jobs->WithLabels({"running", "we\"ird\\na\nme \xC3\xA9"}).Set(3);
  Ok(r.AddCounter("tandem_launches_total", "Launches."))->Get().Inc(7);
  auto* lat = Ok(r.AddHistogram("tandem_launch_latency_seconds", "Latency.", {0.5, 1}, {"backend"}));
  lat->WithLabels({"local"}).Observe(0.25);
  lat->WithLabels({"local"}).Observe(3);

  char path[] = "/tmp/tandem-metrics-XXXXXX";
  int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::close(fd);
  { std::ofstream(path, std::ios::binary) << r.Render(); }
  const std::string script =
      "import json,sys\n"
      "from prometheus_client.parser import text_string_to_metric_families as p\n"
      "out={}\n"
      "for f in p(open(sys.argv[1],encoding='utf-8').read()):\n"
      "  out[f.name]={'type':f.type,'doc':f.documentation,'samples':[[s.name,s.labels,s.value] for s in f.samples]}\n"
      "print(json.dumps(out))\n";
  const std::string script_path = std::string(path) + ".py";
  { std::ofstream(script_path) << script; }
  std::string cmd = "/usr/bin/python3 " + script_path + " " + path;
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string result;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) result.append(buf, n);
  int rc = ::pclose(p);
  std::remove(path);
  std::remove(script_path.c_str());
  ASSERT_EQ(rc, 0) << "the parser rejected our output";
  nlohmann::json got = nlohmann::json::parse(result);

  EXPECT_EQ(got["tandem_jobs"]["type"], "gauge");
  EXPECT_EQ(got["tandem_jobs"]["doc"], "Jobs by state.\nSecond line \\ here");
  EXPECT_EQ(got["tandem_jobs"]["samples"][0][1]["name"], "we\"ird\\na\nme \xC3\xA9");
  EXPECT_EQ(got["tandem_jobs"]["samples"][0][2], 3.0);
  EXPECT_EQ(got["tandem_launches"]["type"], "counter");
  EXPECT_EQ(got["tandem_launches"]["samples"][0][2], 7.0);
  const auto& h = got["tandem_launch_latency_seconds"];
  EXPECT_EQ(h["type"], "histogram");
  ASSERT_EQ(h["samples"].size(), 5u);  // three buckets, sum, count
  EXPECT_EQ(h["samples"][0][1]["le"], "0.5");
  EXPECT_EQ(h["samples"][0][2], 1.0);
  EXPECT_EQ(h["samples"][2][1]["le"], "+Inf");
  EXPECT_EQ(h["samples"][2][2], 2.0);
  EXPECT_EQ(h["samples"][3][0], "tandem_launch_latency_seconds_sum");
  EXPECT_EQ(h["samples"][3][2], 3.25);
}

}  // namespace
}  // namespace tandem::metrics
