// The numbers workers send in `metrics` lines (docs/control-protocol.md;
// the actor's per-step line: docs/rl.md "Metrics"), kept by the daemon:
//   - as Prometheus gauges tandem_worker_metric{job, worker, name} on
//     /metrics, the latest value of each, dropped when the job ends;
//   - passed to listeners (tandem run prints a progress line per step).
// Bounded against a hostile worker: a name must match [A-Za-z0-9_./:-]
// {1,64}, only finite numbers count, at most kMaxNamesPerWorker names per
// worker and kMaxWorkers workers per job; what does not fit is skipped
// (and counted in tandem_worker_metrics_skipped_total).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "orchestrator/metrics/registry.h"

namespace tandem::daemon {

class WorkerMetrics {
 public:
  static constexpr size_t kMaxNamesPerWorker = 64;
  static constexpr size_t kMaxWorkers = 64;
  using Values = std::vector<std::pair<std::string, double>>;  // in the line's order
  using Listener = std::function<void(const std::string& job, const std::string& worker, std::optional<int64_t> step,
                                      const Values& values)>;

  explicit WorkerMetrics(metrics::Registry& registry);

  // `values` is the line's object; what is kept is passed to the listeners.
  void Record(const std::string& job, const std::string& worker, std::optional<int64_t> step,
              const nlohmann::json& values);
  // The job ended: its series go.
  void Forget(const std::string& job);

  uint64_t AddListener(Listener listener);
  void RemoveListener(uint64_t id);

 private:
  metrics::Family<metrics::Gauge>* gauges_;
  metrics::Family<metrics::Counter>* skipped_;
  std::map<std::string, std::map<std::string, std::set<std::string>>> names_;  // job -> worker -> names
  std::map<uint64_t, Listener> listeners_;
  uint64_t next_listener_ = 1;
};

}  // namespace tandem::daemon
