// The JSON of POST /generate (issue #14 item 1; docs/inference.md "HTTP
// API"): strict parsing of a request body into GenerateRequests, and the
// response objects in SGLang's native shape. Torch-free; no I/O.
//
// Request (SGLang's GenerateReqInput, the fields tandem serves):
//   {"input_ids": [1, 2] | [[1, 2], [3]],  or  "text": "..." | ["...", ...],
//    "sampling_params": {temperature, top_p, top_k, min_p, max_new_tokens,
//                        stop, stop_token_ids, n, seed, ignore_eos}
//                       | [one object per prompt],
//    "return_logprob": bool, "stream": bool}
// Parsing is strict: an unknown field, a wrong type, a token id outside
// [0, vocab), an empty prompt, a prompt that with max_new_tokens does not fit
// the context, or a body over the limits is an InvalidArgument whose message
// starts with the field's path ("sampling_params[1]: top_p: must lie in
// (0, 1], got 0.000000"). null for a sampling parameter, return_logprob or
// stream means its default. Nothing here throws or recurses on the input.
//
// Response, per sample (SGLang's shape):
//   {"text": "...", "output_ids": [...],
//    "meta_info": {"id": "7", "finish_reason": null | {"type": "stop",
//    "matched": <stop string or token id>} | {"type": "length", "length": N}
//    | {"type": "abort"}, "prompt_tokens", "completion_tokens",
//    "cached_tokens", "weight_version": "3",
//    "output_token_logprobs": [[logprob, token_id, null], ...] (when asked)}}
// A body with one prompt (flat input_ids or a text string) and n = 1 is
// answered with one object; a batch or n > 1 with a list, prompt-major
// (prompt 0's n samples, then prompt 1's, ...).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "workers/inference/generation.h"

namespace tandem::inference {

// Text <-> token ids for "text" prompts and "text" outputs. The integrator
// binds it to workers/data/tokenizer.h's Tokenizer. Must be safe to call from
// the server's io thread while the engine runs.
class TextCodec {
 public:
  virtual ~TextCodec() = default;
  // InvalidArgument (e.g. ill-formed UTF-8) is answered 400.
  virtual StatusOr<std::vector<int32_t>> Encode(std::string_view text) const = 0;
  virtual StatusOr<std::string> Decode(std::span<const int32_t> ids) const = 0;
};

struct GenerateLimits {
  int64_t vocab_size = 0;          // token ids must lie in [0, vocab_size)
  int64_t max_context_length = 0;  // prompt tokens + max_new_tokens <= this
  size_t max_prompts = 1024;       // prompts in one body
  int64_t max_samples = 4096;      // prompts x n in one body
  size_t max_stop_strings = 32;
  size_t max_stop_string_bytes = 512;
  size_t max_stop_token_ids = 1024;
  size_t max_json_depth = 8;       // the deepest valid body nests 3 levels
};

struct GenerateBody {
  std::vector<GenerateRequest> prompts;
  bool batch = false;   // input_ids was a list of lists, or text a list
  bool stream = false;  // "stream": true: server-sent events
  // A list is answered when the body is a batch or a prompt asks n > 1.
  bool AnswersList() const;
  int64_t Samples() const;  // the sum of n over the prompts
};

// `codec` may be null: then "text" is refused (400) and only input_ids serve.
StatusOr<GenerateBody> ParseGenerateBody(std::string_view body, const GenerateLimits& limits,
                                         const TextCodec* codec);

// One sample as the API reports it: while it runs, the tokens streamed so far
// (result empty); once finished, its SampleResult.
struct SampleProgress {
  std::vector<int32_t> output_ids;
  std::vector<float> output_token_logprobs;
  std::optional<SampleResult> result;
};

// The response object of one sample (shape above). `id` is meta_info.id;
// `weight_version` is reported until the result says otherwise. "text" is
// present when `codec` is given: the decoded output, cut before the stop
// string that ended it; while running, without a trailing incomplete UTF-8
// character (U+FFFD) that the next token may complete.
nlohmann::json SampleJson(const GenerateRequest& request, std::string_view id, const SampleProgress& sample,
                          int64_t weight_version, const TextCodec* codec);

// {"error": {"message": message, "code": code}}.
nlohmann::json ErrorJson(std::string_view code, std::string_view message);

}  // namespace tandem::inference
