// The JSON of the teacher's POST /score (issue #14 item 6; docs/inference.md
// "tandem-worker teacher"): the request types, strict parsing of a body,
// and the response. Torch-free; no I/O.
//
// Request:
//   {"input_ids": [1, 2, 3] | [[1, 2, 3], [1, 2, 4]],
//    "score_from": 1 | [1, 2],       // per sequence (or one for all): the
//                                    // first position scored, in [1, len];
//                                    // default 1 (every token but the first)
//    "top_logprobs_num": 0,          // k most likely tokens per scored position
//    "temperature": 1.0}             // log-probs of softmax(logits / T)
// Parsing is strict: an unknown field, a wrong type, an empty sequence, a
// token id outside [0, vocab), a sequence longer than the context, a
// score_from outside [1, len], or a body over the limits is an
// InvalidArgument whose message starts with the field's path
// ("input_ids[3]: 9000 tokens, the context is 4096").
//
// Response:
//   {"results": [{"token_logprobs": [lp, ...],  // log p(token i | tokens < i),
//                                               // i = score_from .. len-1
//                 "top_logprobs": [[[lp, id, null], ...], ...],  // when asked
//                 "input_tokens": L, "scored_tokens": L - score_from}, ...],
//    "meta_info": {"id": "7", "weight_version": "3", "input_tokens": N,
//                  "scored_tokens": M}}
// One result per sequence, in the body's order, also for a flat input_ids.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tandem::inference {

struct ScoreRequest {
  std::vector<std::vector<int32_t>> sequences;  // each non-empty
  std::vector<int32_t> score_from;              // per sequence, in [1, len]
  int64_t top_k = 0;
  double temperature = 1.0;
  int64_t Tokens() const;        // the sum of the sequences' lengths
  int64_t ScoredTokens() const;  // the sum of len - score_from
};

struct ScoredSequence {
  std::vector<float> logprobs;      // [len - score_from]
  std::vector<float> top_logprobs;  // [len - score_from, top_k] row-major, descending per row
  std::vector<int32_t> top_ids;     // [len - score_from, top_k]
};

struct ScoreResult {
  std::vector<ScoredSequence> sequences;  // the request's order
  int64_t weight_version = 0;             // the weights that scored it
};

struct ScoreLimits {
  int64_t vocab_size = 0;            // token ids must lie in [0, vocab_size)
  int64_t max_context_length = 0;    // tokens per sequence
  size_t max_sequences = 4096;       // sequences in one body
  int64_t max_tokens = 1 << 22;      // tokens in one body
  int64_t max_top_k = 64;
  size_t max_json_depth = 4;         // the deepest valid body nests 3 levels
};

StatusOr<ScoreRequest> ParseScoreBody(std::string_view body, const ScoreLimits& limits);

nlohmann::json ScoreResponseJson(const ScoreRequest& request, const ScoreResult& result, std::string_view id);

}  // namespace tandem::inference
