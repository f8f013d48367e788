// Table tests of the job manager's pure decisions (job_decisions.h): device
// grants and restart policy with backoff.
#include "orchestrator/daemon/job_decisions.h"

#include <gtest/gtest.h>

namespace tandem::daemon {
namespace {

using Kind = spec::RestartPolicy::Kind;

TEST(ChooseDevices, Table) {
  struct Row {
    const char* what;
    std::vector<int> gpus;
    std::set<int> busy;
    std::vector<int> logical;
    bool explicit_ids;
    std::optional<std::vector<int>> want;
  };
  const std::vector<Row> rows = {
      {"no devices needed", {0, 1}, {}, {}, false, std::vector<int>{}},
      {"first free in order", {4, 5, 6, 7}, {5}, {0, 1}, false, std::vector<int>{4, 6}},
      {"not enough free", {4, 5, 6}, {4, 6}, {0, 1}, false, std::nullopt},
      {"all free", {0, 1, 2}, {}, {0, 1, 2}, false, std::vector<int>{0, 1, 2}},
      {"explicit ids name inventory positions", {10, 11, 12}, {}, {2, 0}, true, std::vector<int>{12, 10}},
      {"explicit id busy waits", {10, 11, 12}, {12}, {2, 0}, true, std::nullopt},
      {"explicit ids ignore other busy gpus", {10, 11, 12}, {11}, {2, 0}, true, std::vector<int>{12, 10}},
      {"explicit id out of range never granted", {10}, {}, {3}, true, std::nullopt},
  };
  for (const Row& r : rows) EXPECT_EQ(ChooseDevices(r.gpus, r.busy, r.logical, r.explicit_ids), r.want) << r.what;
}

TEST(DecideRestart, Table) {
  auto policy = [](Kind k, int max, double initial = 1.0, double cap = 30.0) {
    spec::RestartPolicy p;
    p.kind = k;
    p.max_restarts = max;
    p.backoff_initial_s = initial;
    p.backoff_max_s = cap;
    return p;
  };
  struct Row {
    const char* what;
    spec::RestartPolicy policy;
    int restarts;
    bool succeeded;
    bool restart;
    double delay_s;
  };
  const std::vector<Row> rows = {
      {"never: failure ends", policy(Kind::kNever, 3), 0, false, false, 0},
      {"never: success ends", policy(Kind::kNever, 3), 0, true, false, 0},
      {"on-failure: first restart after backoff_initial_s", policy(Kind::kOnFailure, 3), 0, false, true, 1.0},
      {"on-failure: success ends", policy(Kind::kOnFailure, 3), 0, true, false, 0},
      {"on-failure: backoff doubles", policy(Kind::kOnFailure, 5), 2, false, true, 4.0},
      {"on-failure: exhausted", policy(Kind::kOnFailure, 3), 3, false, false, 0},
      {"always: success restarts", policy(Kind::kAlways, 2), 1, true, true, 2.0},
      {"always: exhausted", policy(Kind::kAlways, 2), 2, true, false, 0},
      {"backoff capped", policy(Kind::kAlways, 100, 1.0, 30.0), 10, true, true, 30.0},
      {"huge restart count does not overflow", policy(Kind::kAlways, 1000000, 0.001, 5.0), 999, false, true, 5.0},
      {"max 0 never restarts", policy(Kind::kAlways, 0), 0, false, false, 0},
  };
  for (const Row& r : rows) {
    const RestartDecision d = DecideRestart(r.policy, r.restarts, r.succeeded);
    EXPECT_EQ(d.restart, r.restart) << r.what;
    if (r.restart) {
      EXPECT_DOUBLE_EQ(d.delay_s, r.delay_s) << r.what;
    }
  }
}

}  // namespace
}  // namespace tandem::daemon
