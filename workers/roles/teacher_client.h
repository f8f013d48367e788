// The controller's client of a teacher's HTTP API (docs/inference.md
// "tandem-worker teacher"; issue #18 item 2): per-token log-probs of the
// student's responses, POST /score (score_json.h's request).
//
// The answer is read as hostile: at most kMaxResponseBytes, a 200 with
// exactly one result per sequence, each with len - score_from finite
// token_logprobs and, when top_k > 0, as many top_logprobs rows of exactly
// top_k [finite log-prob, token id >= 0, ...] entries; anything else is an
// error naming the teacher and what was wrong. A call of many sequences goes out in bodies of at most
// kScoreSequencesPerBody, one after the other, within one deadline.
// Torch-free; blocking; thread-compatible.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "workers/roles/rollout_client.h"

namespace tandem::roles {

inline constexpr size_t kScoreSequencesPerBody = 256;

struct ScoreCall {
  std::vector<std::vector<int32_t>> sequences;  // prompt + response
  std::vector<int32_t> score_from;              // per sequence, in [1, len]: the prompt's length
  double temperature = 1.0;                     // log-probs of softmax(logits / temperature)
  int64_t top_k = 0;                            // > 0: also the k most likely tokens at each position
};

// One sequence's scores, from score_from on.
struct TeacherScore {
  std::vector<float> logprobs;      // the teacher's log-prob of each token
  std::vector<int32_t> top_ids;     // top_k > 0: [tokens * top_k] row-major, most likely first
  std::vector<float> top_logprobs;  // their log-probs
};

StatusOr<std::vector<TeacherScore>> Score(const RolloutEndpoint& teacher, const ScoreCall& call,
                                          std::chrono::milliseconds timeout);

// The request body of sequences [begin, end) of `call` (exposed for tests).
std::string ScoreBody(const ScoreCall& call, size_t begin, size_t end);
// Parses a /score answer to sequences [begin, end) of `call` (exposed for tests).
StatusOr<std::vector<TeacherScore>> ParseScoreAnswer(const std::string& body, const ScoreCall& call, size_t begin,
                                                     size_t end);

}  // namespace tandem::roles
