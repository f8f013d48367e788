// libFuzzer target: the inference workers' request-body parsers on any
// bytes, as they come from an HTTP client (issue #14 items 1 and 6): POST
// /generate's (ParseGenerateBody) and POST /score's (ParseScoreBody), the
// same bytes through both. Nothing may crash, throw, leak or trip a
// sanitizer. An accepted /generate body must satisfy what the engine is
// promised (engine.h): every prompt non-empty with ids in [0, vocab), its
// params passing Validate, prompt + max_new_tokens within the context, the
// samples within the limit; the response object of a sample of each prompt
// must dump as JSON. An accepted /score body: every sequence non-empty,
// within the context, ids in the vocabulary, score_from in [1, len], top_k
// and temperature in range; its response dumps. Seeds:
// tests/fuzz/inference_json/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/bounded_json.h"
#include "workers/inference/generate_json.h"
#include "workers/inference/score_json.h"

using namespace tandem;
using namespace tandem::inference;

namespace {

// A byte is a token; ids decode to letters.
class ByteCodec : public TextCodec {
 public:
  StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    for (const char c : text) ids.push_back(static_cast<unsigned char>(c));
    return ids;
  }
  StatusOr<std::string> Decode(std::span<const int32_t> ids) const override {
    std::string s;
    for (const int32_t id : ids) s.push_back(static_cast<char>('a' + id % 26));
    return s;
  }
};

void CheckScoreBody(std::string_view body) {
  ScoreLimits limits;
  limits.vocab_size = 300;
  limits.max_context_length = 512;
  limits.max_sequences = 64;
  limits.max_tokens = 4096;
  auto parsed = ParseScoreBody(body, limits);
  if (!parsed.ok()) {
    if (parsed.status().code() != StatusCode::kInvalidArgument || parsed.status().message().empty()) std::abort();
    (void)DumpJson(ErrorJson("invalid_argument", parsed.status().message()));
    return;
  }
  const ScoreRequest& r = *parsed;
  if (r.sequences.empty() || r.sequences.size() > limits.max_sequences || r.score_from.size() != r.sequences.size() ||
      r.Tokens() > limits.max_tokens || r.top_k < 0 || r.top_k > limits.max_top_k || !(r.temperature > 0))
    std::abort();
  ScoreResult result;
  for (size_t i = 0; i < r.sequences.size(); ++i) {
    const auto len = static_cast<int64_t>(r.sequences[i].size());
    if (len == 0 || len > limits.max_context_length || r.score_from[i] < 1 || r.score_from[i] > len) std::abort();
    for (const int32_t id : r.sequences[i])
      if (id < 0 || id >= limits.vocab_size) std::abort();
    ScoredSequence s;
    const auto n = static_cast<size_t>(len - r.score_from[i]);
    s.logprobs.assign(n, -0.5f);
    s.top_logprobs.assign(n * static_cast<size_t>(r.top_k), -1.0f);
    s.top_ids.assign(n * static_cast<size_t>(r.top_k), 7);
    result.sequences.push_back(std::move(s));
  }
  (void)DumpJson(ScoreResponseJson(r, result, "1"));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ByteCodec codec;
  GenerateLimits limits;
  limits.vocab_size = 300;
  limits.max_context_length = 2048;
  limits.max_prompts = 64;
  limits.max_samples = 256;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  CheckScoreBody(body);
  auto parsed = ParseGenerateBody(body, limits, (size % 2) ? &codec : nullptr);
  if (!parsed.ok()) {
    if (parsed.status().code() != StatusCode::kInvalidArgument || parsed.status().message().empty()) std::abort();
    (void)DumpJson(ErrorJson("invalid_argument", parsed.status().message()));  // messages quote the input
    return 0;
  }
  if (parsed->prompts.empty() || parsed->Samples() > limits.max_samples) std::abort();
  if (parsed->prompts.size() > 1 && !parsed->batch) std::abort();
  for (const auto& p : parsed->prompts) {
    if (p.input_ids.empty() || !Validate(p.params).ok()) std::abort();
    for (const int32_t id : p.input_ids)
      if (id < 0 || id >= limits.vocab_size) std::abort();
    for (const int32_t id : p.params.stop_token_ids)
      if (id < 0 || id >= limits.vocab_size) std::abort();
    if (static_cast<int64_t>(p.input_ids.size()) + p.params.max_new_tokens > limits.max_context_length) std::abort();
    SampleProgress s;
    s.output_ids = {p.input_ids.back()};
    s.output_token_logprobs = {-1.0f};
    (void)DumpJson(SampleJson(p, "1", s, 0, &codec));
    s.result = SampleResult{};
    s.result->output_ids = p.input_ids;
    s.result->finish_reason = FinishReason::kStop;
    s.result->matched_stop = p.params.stop.empty() ? "" : p.params.stop.front();
    (void)DumpJson(SampleJson(p, "1", s, 0, &codec));
  }
  return 0;
}
