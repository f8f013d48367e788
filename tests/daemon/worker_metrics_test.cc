// Workers' metrics lines in the daemon (orchestrator/daemon/worker_metrics.h):
// the latest value of each as a gauge, listeners see what was kept, a job's
// series go when it ends, and hostile lines stay bounded.
#include "orchestrator/daemon/worker_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>

namespace tandem::daemon {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(WorkerMetrics, KeepsTheLatestValuesAsGaugesAndTellsListeners) {
  metrics::Registry r;
  WorkerMetrics m(r);
  std::vector<std::string> seen;
  const uint64_t id = m.AddListener([&](const std::string& job, const std::string& worker, std::optional<int64_t> step,
                                        const WorkerMetrics::Values& values) {
    seen.push_back(job + " " + worker + " " + std::to_string(step.value_or(-1)) + " " + std::to_string(values.size()));
  });
  m.Record("j1", "actor/0", 1, {{"reward/mean", 0.25}, {"accuracy", 0.5}});
  m.Record("j1", "actor/0", 2, {{"reward/mean", 0.75}, {"note", "text"}});
  const std::string text = r.Render();
  EXPECT_THAT(text, HasSubstr(R"(tandem_worker_metric{job="j1",worker="actor/0",name="reward/mean"} 0.75)"));
  EXPECT_THAT(text, HasSubstr(R"(tandem_worker_metric{job="j1",worker="actor/0",name="accuracy"} 0.5)"));
  EXPECT_THAT(text, Not(HasSubstr("note")));
  EXPECT_EQ(seen, (std::vector<std::string>{"j1 actor/0 1 2", "j1 actor/0 2 1"}));
  m.RemoveListener(id);
  m.Record("j1", "actor/0", 3, {{"accuracy", 1}});
  EXPECT_EQ(seen.size(), 2u);
  m.Forget("j1");
  EXPECT_THAT(r.Render(), Not(HasSubstr("j1")));
}

TEST(WorkerMetrics, HostileLinesStayBounded) {
  metrics::Registry r;
  WorkerMetrics m(r);
  nlohmann::json many = nlohmann::json::object();
  for (int i = 0; i < 1000; ++i) many["k" + std::to_string(i)] = i;
  many["bad name"] = 1;
  many[std::string(65, 'x')] = 1;
  many["inf"] = std::numeric_limits<double>::infinity();
  m.Record("j", "actor/0", 1, many);
  m.Record("j", "actor/0", 2, many);  // the same names again: still within the bound
  for (int w = 0; w < 100; ++w) m.Record("j", "w/" + std::to_string(w), 1, {{"x", 1}});
  const std::string text = r.Render();
  size_t series = 0;
  for (size_t at = text.find("tandem_worker_metric{"); at != std::string::npos;
       at = text.find("tandem_worker_metric{", at + 1))
    ++series;
  // 64 names of actor/0, one each for the 63 other workers admitted.
  EXPECT_EQ(series, WorkerMetrics::kMaxNamesPerWorker + WorkerMetrics::kMaxWorkers - 1);
  EXPECT_THAT(text, Not(HasSubstr(R"(name="bad name")")));
  EXPECT_THAT(text, HasSubstr("tandem_worker_metrics_skipped_total"));
  m.Forget("j");
  EXPECT_THAT(r.Render(), Not(HasSubstr("tandem_worker_metric{")));
}

}  // namespace
}  // namespace tandem::daemon
