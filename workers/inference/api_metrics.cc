// GET /metrics as Prometheus text; see api_metrics.h.
#include "workers/inference/api_metrics.h"

#include <iterator>

#include <fmt/format.h>

namespace tandem::inference {

namespace {

void Family(std::string* out, std::string_view name, std::string_view type, std::string_view help) {
  fmt::format_to(std::back_inserter(*out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

template <typename T>
void One(std::string* out, std::string_view name, std::string_view type, std::string_view help, T value) {
  Family(out, name, type, help);
  fmt::format_to(std::back_inserter(*out), "{} {}\n", name, value);
}

// The server's counters and the response counts, under `prefix`_http_*.
void HttpFamilies(std::string* out, std::string_view prefix, const HttpCounters* http,
                  const ResponseCounts* responses) {
  const std::string p(prefix);
  if (http != nullptr) {
    One(out, p + "_http_open_connections", "gauge", "Open HTTP connections.", http->open_connections.load());
    One(out, p + "_http_refused_connections_total", "counter", "Connections closed at once: over the connection cap.",
        http->refused_connections.load());
    One(out, p + "_http_dropped_slow_clients_total", "counter",
        "Stream readers dropped for falling behind the output queue bound.", http->dropped_slow_clients.load());
  }
  if (responses != nullptr) {
    Family(out, p + "_http_responses_total", "counter", "HTTP responses by endpoint and status.");
    for (const auto& [key, count] : *responses)
      fmt::format_to(std::back_inserter(*out), "{}_http_responses_total{{endpoint=\"{}\",code=\"{}\"}} {}\n", p,
                     key.first, key.second, count);
  }
}

}  // namespace

std::string PrometheusText(const ApiMetrics& m) {
  std::string out;
  const EngineStats& s = m.stats;
  One(&out, "tandem_inference_running_requests", "gauge", "Requests in the running batch.", s.running_requests);
  One(&out, "tandem_inference_queued_requests", "gauge", "Requests accepted and waiting to run.", s.queued_requests);
  One(&out, "tandem_inference_generated_tokens_total", "counter", "Tokens generated since start.",
      s.generated_tokens_total);
  One(&out, "tandem_inference_prompt_tokens_total", "counter", "Prompt tokens accepted since start.",
      s.prompt_tokens_total);
  One(&out, "tandem_inference_generation_tokens_per_second", "gauge",
      "Tokens generated per second over the last 10 s.", fmt::format("{:.3f}", m.tokens_per_second));
  One(&out, "tandem_inference_kv_blocks_used", "gauge", "Paged KV cache blocks in use.", s.kv_blocks_used);
  One(&out, "tandem_inference_kv_blocks_free", "gauge", "Paged KV cache blocks free.", s.kv_blocks_free);
  One(&out, "tandem_inference_prefix_cache_hit_tokens_total", "counter",
      "Prompt tokens served from the prefix cache.", s.prefix_cache_hit_tokens_total);
  One(&out, "tandem_inference_prefix_cache_query_tokens_total", "counter",
      "Prompt tokens looked up in the prefix cache.", s.prefix_cache_query_tokens_total);
  const double rate = s.prefix_cache_query_tokens_total == 0
                          ? 0.0
                          : static_cast<double>(s.prefix_cache_hit_tokens_total) /
                                static_cast<double>(s.prefix_cache_query_tokens_total);
  One(&out, "tandem_inference_prefix_cache_hit_rate", "gauge",
      "Prefix-cache hit tokens over looked-up tokens since start.", fmt::format("{:.6f}", rate));
  One(&out, "tandem_inference_paused", "gauge", "1 while generation is paused.", s.paused ? 1 : 0);
  One(&out, "tandem_inference_steps_total", "counter", "Engine steps run.", s.steps_total);
  One(&out, "tandem_inference_decode_graph_steps_total", "counter", "Engine steps replayed through a CUDA graph.",
      s.graph_steps_total);
  Family(&out, "tandem_inference_step_seconds_total", "counter",
         "Engine thread seconds per part of a step: plan, launch (model and sampler, host), wait (for the sampled "
         "tokens), commit (and deliver).");
  for (const auto& [part, seconds] : {std::pair{"plan", s.step_plan_seconds}, std::pair{"launch", s.step_launch_seconds},
                                      std::pair{"wait", s.step_wait_seconds}, std::pair{"commit", s.step_commit_seconds}})
    fmt::format_to(std::back_inserter(out), "tandem_inference_step_seconds_total{{part=\"{}\"}} {:.6f}\n", part,
                   seconds);
  One(&out, "tandem_inference_weight_version", "gauge", "The weight version new requests start with.",
      m.weight_version);
  One(&out, "tandem_inference_generate_calls_open", "gauge", "POST /generate calls in flight.",
      m.open_generate_calls);
  HttpFamilies(&out, "tandem_inference", m.http, m.responses);
  return out;
}

std::string ScorePrometheusText(const ScoreApiMetrics& m) {
  std::string out;
  const ScoreStats& s = m.stats;
  One(&out, "tandem_teacher_running_requests", "gauge", "Requests with sequences being scored.", s.running_requests);
  One(&out, "tandem_teacher_queued_requests", "gauge", "Requests accepted and waiting to be scored.",
      s.queued_requests);
  One(&out, "tandem_teacher_requests_total", "counter", "Requests answered with their scores.", s.requests_total);
  One(&out, "tandem_teacher_sequences_total", "counter", "Sequences scored.", s.sequences_total);
  One(&out, "tandem_teacher_input_tokens_total", "counter", "Tokens of the sequences scored.", s.input_tokens_total);
  One(&out, "tandem_teacher_packed_tokens_total", "counter",
      "Tokens run through the model (a prefix shared by sequences once).", s.packed_tokens_total);
  One(&out, "tandem_teacher_scored_tokens_total", "counter", "Token log-probs returned.", s.scored_tokens_total);
  One(&out, "tandem_teacher_forwards_total", "counter", "Model forward passes.", s.forwards_total);
  One(&out, "tandem_teacher_scored_tokens_per_second", "gauge", "Token log-probs returned per second over the last 10 s.",
      fmt::format("{:.3f}", m.tokens_per_second));
  One(&out, "tandem_teacher_paused", "gauge", "1 while scoring is paused.", s.paused ? 1 : 0);
  One(&out, "tandem_teacher_weight_version", "gauge", "The weight version that scores new requests.",
      m.weight_version);
  One(&out, "tandem_teacher_score_calls_open", "gauge", "POST /score calls in flight.", m.open_score_calls);
  HttpFamilies(&out, "tandem_teacher", m.http, m.responses);
  return out;
}

}  // namespace tandem::inference
