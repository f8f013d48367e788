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

}  // namespace tandem::agents
