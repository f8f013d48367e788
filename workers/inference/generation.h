// The rollout engine's request and result types (issue #14; docs/inference.md):
// what the HTTP API (http_api), the scheduler and the generator exchange.
// Torch-free. Field names and defaults follow SGLang's native /generate API
// (`sampling_params`, `meta_info`), so a controller scripted against SGLang
// reads the same JSON.
//
// Contract: a SamplingParams reaching the engine has passed Validate()
// (the HTTP layer answers 400 with its message otherwise); the engine never
// re-checks ranges.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tandem::inference {

struct SamplingParams {
  double temperature = 1.0;  // 0: greedy (argmax; ties to the lowest id)
  double top_p = 1.0;        // (0, 1]
  int64_t top_k = -1;        // -1: all; else >= 1
  double min_p = 0.0;        // [0, 1]
  int64_t max_new_tokens = 128;  // >= 1
  std::vector<std::string> stop;         // stop strings (matched on decoded text; not included)
  std::vector<int32_t> stop_token_ids;   // stop tokens (included in output_ids, as SGLang does)
  int64_t n = 1;                         // samples of this prompt; they share its prefill
  std::optional<uint64_t> seed;          // per-request seed: same seed, same tokens
  bool ignore_eos = false;               // do not stop at the tokenizer's EOS tokens
};

// InvalidArgument naming the field and the allowed range.
Status Validate(const SamplingParams& params);

// A request's id: unique per engine for its lifetime; never 0.
using RequestId = int64_t;

// SGLang's pause modes (issue #14 item 3), as the HTTP API, the control
// protocol's `pause` and the scheduler name them.
enum class PauseMode {
  kAbort,    // running and queued requests end with finish_reason abort
  kRetract,  // requests drop their KV; after Continue they are prefilled again and go on
  kInPlace,  // requests keep their KV and wait
};
// "abort", "retract", "in_place".
const char* PauseModeName(PauseMode mode);
// InvalidArgument naming the allowed values.
StatusOr<PauseMode> ParsePauseMode(std::string_view name);

enum class FinishReason { kStop, kLength, kAbort };
// "stop", "length", "abort" (SGLang's finish_reason.type).
const char* FinishReasonName(FinishReason reason);

// One prompt (one of `n` samples is a Sequence inside the engine).
struct GenerateRequest {
  std::vector<int32_t> input_ids;
  SamplingParams params;
  bool return_logprob = false;
};

// One sample's result. output_token_logprobs[i] is log p(output_ids[i])
// under the distribution it was drawn from, softmax(logits / temperature)
// before the filters (temperature 1 for a greedy request; SGLang's default,
// the behaviour policy's log-prob RL needs), present when return_logprob.
struct SampleResult {
  std::vector<int32_t> output_ids;
  std::vector<float> output_token_logprobs;
  FinishReason finish_reason = FinishReason::kLength;
  std::string matched_stop;  // the stop string or token that ended it, if any
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens served from the prefix cache
  int64_t weight_version = 0; // the weights the sample was generated with
};

}  // namespace tandem::inference
