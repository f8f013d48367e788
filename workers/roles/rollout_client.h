// The controller's client of the rollout's HTTP API (docs/inference.md
// "HTTP API"; issue #16 item 5): one POST /generate of a batch of prompts,
// n samples each, with the rollout's log-prob of every sampled token.
//
// The answer is read as hostile: at most kMaxResponseBytes, a 200 with a
// JSON list of exactly prompts x n samples (prompt-major), each with
// output_ids (ints) and meta_info.output_token_logprobs ([[logprob, id,
// null], ...], one per output id, the id equal), a finish_reason and a
// weight_version; anything else is an error naming the rollout and what
// was wrong (a non-200 carries its body's first bytes). Connect, write and
// read share one deadline (`timeout`): a rollout that never answers is a
// DeadlineExceeded, never a hang. Torch-free; blocking; thread-compatible.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "workers/roles/http_post.h"

namespace tandem::roles {

struct GenerateCall {
  std::vector<std::vector<int32_t>> prompts;
  int64_t n = 1;                   // samples per prompt
  double temperature = 1.0;
  int64_t max_new_tokens = 64;
  std::vector<int32_t> stop_token_ids;
  int64_t seed = -1;               // < 0: the rollout's own
};

struct RolloutSample {
  std::vector<int32_t> output_ids;
  std::vector<float> logprobs;     // one per output id
  std::string finish_reason;       // "stop", "length", "abort"
  int64_t weight_version = -1;     // the version it was generated under (the last one if it spans a reload)
};

struct RolloutEndpoint {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string Describe() const { return host + ":" + std::to_string(port); }
};

StatusOr<std::vector<RolloutSample>> Generate(const RolloutEndpoint& rollout, const GenerateCall& call,
                                              std::chrono::milliseconds timeout);

// The request body for `call` (exposed for tests).
std::string GenerateBody(const GenerateCall& call);
// Parses a /generate answer for `expected` samples (exposed for tests).
StatusOr<std::vector<RolloutSample>> ParseGenerateAnswer(const std::string& body, size_t expected);

}  // namespace tandem::roles
