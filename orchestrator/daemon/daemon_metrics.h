// The metrics tandemd exports on GET /metrics (docs/api.md lists them),
// registered once at start-up. Updated and rendered on the io thread only.
#pragma once

#include "orchestrator/metrics/registry.h"

namespace tandem::daemon {

struct DaemonMetrics {
  explicit DaemonMetrics(metrics::Registry& r)
      : registry(r),
        jobs_submitted(*r.AddCounter("tandem_jobs_submitted_total", "Jobs accepted by this daemon")),
        jobs_finished(*r.AddCounter("tandem_jobs_finished_total", "Jobs that reached an end state", {"state"})),
        task_launches(*r.AddCounter("tandem_task_launches_total", "Task launches, restarts included")),
        task_restarts(*r.AddCounter("tandem_task_restarts_total", "Task restarts by the restart policy")),
        launch_latency(*r.AddHistogram("tandem_launch_latency_seconds",
                                       "Job submitted to task running (first launch)",
                                       {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1, 5})),
        http_requests(*r.AddCounter("tandem_http_requests_total", "HTTP requests by method", {"method"})),
        jobs(*r.AddGauge("tandem_jobs", "Jobs by state", {"state"})),
        tasks(*r.AddGauge("tandem_tasks", "Tasks by state", {"state"})) {}

  metrics::Registry& registry;
  metrics::Family<metrics::Counter>* jobs_submitted;
  metrics::Family<metrics::Counter>* jobs_finished;
  metrics::Family<metrics::Counter>* task_launches;
  metrics::Family<metrics::Counter>* task_restarts;
  metrics::Family<metrics::Histogram>* launch_latency;
  metrics::Family<metrics::Counter>* http_requests;
  metrics::Family<metrics::Gauge>* jobs;
  metrics::Family<metrics::Gauge>* tasks;
};

}  // namespace tandem::daemon
