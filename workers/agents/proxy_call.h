// The CPU work of one proxied call, run on the proxy's worker pool, never
// on its io thread (docs/agents.md "Threads"): before the rollout, parse the
// body, find the session's parent turn and build the prompt ids (exact
// tokens, session_store.h) and the /generate body; after it, read the
// rollout's answer, decode, cut at stop strings, parse tool calls, record
// the turns and build the OpenAI answer. Torch-free; no I/O; thread-safe
// given a thread-safe SessionStore and Tokenizer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "workers/agents/openai_request.h"
#include "workers/agents/openai_response.h"
#include "workers/agents/session_store.h"
#include "workers/data/tokenizer.h"

namespace tandem::agents {

struct PreparedCall {
  bool chat = true;
  std::string model;
  SamplingOptions sampling;
  bool parse_tool_calls = false;
  std::string session_id;  // "" not recorded
  uint64_t serial = 0;     // the session's (SessionStore::Open)
  int64_t parent = -1;     // the turn continued, or the same prompt's parent
  std::vector<int32_t> prompt_ids;
  std::shared_ptr<const Conversation> asked;  // chat
  std::string generate_body;                  // POST /generate
};

struct CallContext {
  const data::Tokenizer* tokenizer = nullptr;
  SessionStore* sessions = nullptr;
  RequestLimits limits;
};

// `header_session`: the X-Session-Id header ("" none); it wins over the
// body's session_id. Errors are openai_error.h's.
StatusOr<PreparedCall> PrepareChat(std::string_view body, const std::string& header_session, const CallContext& ctx);
StatusOr<PreparedCall> PrepareCompletion(std::string_view body, const std::string& header_session,
                                         const CallContext& ctx);

struct FinishedCall {
  Answer answer;
  bool aborted = false;  // a sample ended "abort" (the rollout paused in abort mode): run the call again
};

// The rollout's /generate answer (a 200's body) as the OpenAI answer; the
// turns recorded in the session unless aborted. DataLoss for an answer that
// is not what was asked.
StatusOr<FinishedCall> FinishCall(const PreparedCall& call, const std::string& generate_answer,
                                  const CallContext& ctx, const std::string& answer_id, int64_t created);

// --- streaming as the rollout generates (docs/agents.md "Streaming").
// A call is forwarded when it streams, parses no tool calls and has no stop
// strings: then nothing the client is sent can be taken back. Otherwise it
// is generated whole and then streamed (FinishCall's events).
bool ForwardsStream(const PreparedCall& call);
// The /generate body of a forwarded call ("stream": true).
std::string StreamingGenerateBody(const PreparedCall& call);

// What a forwarded call has streamed so far, per sample. Owned by the call;
// used by one thread at a time.
struct StreamState {
  struct Sample {
    std::vector<int32_t> ids;
    std::vector<float> logprobs;
    size_t sent_ids = 0;     // ids whose log-probs went out
    size_t sent_bytes = 0;   // text that went out
    bool began = false;
    std::string finish_reason;  // the rollout's, "" while running
    int64_t weight_version = -1;
  };
  std::vector<Sample> samples;
};

// One event of the rollout's stream (a sample object, cumulative: SGLang's
// shape, docs/inference.md) -> the OpenAI chunks it adds (role first, then
// text deltas that never end inside a UTF-8 character, then the finish).
// DataLoss for an event that does not extend what came before; Unavailable
// for a sample the rollout aborted (a pause in abort mode: the stream ends
// with an error event).
StatusOr<std::vector<std::string>> StreamEvent(const PreparedCall& call, std::string_view event, const CallContext& ctx,
                                               StreamState* state, const Answer& head);
// The stream ended ([DONE]): records the turns, gives the last chunks
// (usage when asked, then [DONE]). DataLoss when a sample never finished.
StatusOr<std::vector<std::string>> StreamEnd(const PreparedCall& call, const CallContext& ctx, StreamState* state,
                                             const Answer& head);

}  // namespace tandem::agents
