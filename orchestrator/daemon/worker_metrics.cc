// Workers' metrics lines as gauges and progress (worker_metrics.h).
#include "orchestrator/daemon/worker_metrics.h"

#include <cmath>

namespace tandem::daemon {
namespace {

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '.' || c == '/' || c == ':' || c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

WorkerMetrics::WorkerMetrics(metrics::Registry& registry)
    : gauges_(*registry.AddGauge("tandem_worker_metric", "The latest value of each number a worker sent in a metrics line",
                                 {"job", "worker", "name"})),
      skipped_(*registry.AddCounter("tandem_worker_metrics_skipped_total",
                                    "Values of workers' metrics lines not kept (a bad name, not a finite number, "
                                    "over the per-worker or per-job bound)")) {}

void WorkerMetrics::Record(const std::string& job, const std::string& worker, std::optional<int64_t> step,
                           const nlohmann::json& values) {
  if (!values.is_object()) return;
  auto& workers = names_[job];
  if (!workers.count(worker) && workers.size() >= kMaxWorkers) {
    skipped_->Get().Inc(static_cast<double>(values.size()));
    return;
  }
  std::set<std::string>& names = workers[worker];
  Values kept;
  for (const auto& [name, v] : values.items()) {
    if (!v.is_number() || !ValidName(name) || !std::isfinite(v.get<double>()) ||
        (!names.count(name) && names.size() >= kMaxNamesPerWorker)) {
      skipped_->Get().Inc();
      continue;
    }
    names.insert(name);
    const double x = v.get<double>();
    gauges_->WithLabels({job, worker, name}).Set(x);
    kept.emplace_back(name, x);
  }
  // A listener may remove itself: iterate over a copy.
  const auto listeners = listeners_;
  for (const auto& [id, l] : listeners) l(job, worker, step, kept);
}

void WorkerMetrics::Forget(const std::string& job) {
  auto it = names_.find(job);
  if (it == names_.end()) return;
  for (const auto& [worker, names] : it->second)
    for (const std::string& name : names) gauges_->Remove({job, worker, name});
  names_.erase(it);
}

uint64_t WorkerMetrics::AddListener(Listener listener) {
  listeners_.emplace(next_listener_, std::move(listener));
  return next_listener_++;
}

void WorkerMetrics::RemoveListener(uint64_t id) { listeners_.erase(id); }

}  // namespace tandem::daemon
