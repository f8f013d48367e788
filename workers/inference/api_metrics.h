// GET /metrics of the rollout worker's HTTP API (docs/inference.md "HTTP
// API"): the engine's stats and the server's counters as Prometheus text
// (exposition format 0.0.4), every family with its HELP and TYPE. Labels are
// from a fixed set (endpoint names, status codes), so the text stays small
// whatever clients send.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "workers/inference/engine.h"
#include "workers/inference/http_server.h"

namespace tandem::inference {

struct ApiMetrics {
  EngineStats stats;
  int64_t weight_version = 0;
  double tokens_per_second = 0;  // generated tokens over the last ~10 s
  const HttpCounters* http = nullptr;
  int64_t open_generate_calls = 0;
  const std::map<std::pair<std::string, int>, uint64_t>* responses = nullptr;  // (endpoint, status) -> count
};

std::string PrometheusText(const ApiMetrics& m);

}  // namespace tandem::inference
