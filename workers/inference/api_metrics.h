// GET /metrics of the rollout's and the teacher's HTTP APIs
// (docs/inference.md "HTTP API", "tandem-worker teacher"): the engine's
// stats and the server's counters as Prometheus text
// (exposition format 0.0.4), every family with its HELP and TYPE. Labels are
// from a fixed set (endpoint names, status codes), so the text stays small
// whatever clients send.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "workers/inference/api_service.h"
#include "workers/inference/engine.h"
#include "workers/inference/score_engine.h"
#include "workers/inference/http_server.h"

namespace tandem::inference {

struct ApiMetrics {
  EngineStats stats;
  int64_t weight_version = 0;
  double tokens_per_second = 0;  // generated tokens over the last ~10 s
  const HttpCounters* http = nullptr;
  int64_t open_generate_calls = 0;
  const ResponseCounts* responses = nullptr;
};

std::string PrometheusText(const ApiMetrics& m);

struct ScoreApiMetrics {
  ScoreStats stats;
  int64_t weight_version = 0;
  double tokens_per_second = 0;  // scored tokens over the last ~10 s
  const HttpCounters* http = nullptr;
  int64_t open_score_calls = 0;
  const ResponseCounts* responses = nullptr;
};

std::string ScorePrometheusText(const ScoreApiMetrics& m);

}  // namespace tandem::inference
