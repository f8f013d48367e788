// Workflows (issue #20 item 1; docs/agents.md "Workflows"): how a prompt
// becomes an episode. A workflow talks to the trained model through an
// OpenAI chat endpoint (the proxy in front of the rollouts, so every token
// is recorded in the episode's session, session_store.h), plays the
// environment's side, and returns the episode's reward. The tokens trained
// on are the session's, never the workflow's text (episode_tokens.h).
// Torch-free.
//
// Built in, registered by name like the data sets (MakeWorkflow):
//   single-turn          one answer, the verifier's reward
//   multi-turn-feedback  on a wrong answer the environment says so and the
//                        model tries again, up to max_turns answers; a right
//                        answer at turn k (1-based) earns discount^(k-1)
//   tool-calls           the model may call tools (a calculator) in Qwen's
//                        <tool_call> format; each call is answered as a
//                        `tool` message and the session goes on, up to
//                        max_turns model turns; the reward is the verifier's
//                        on the last answer without tool calls
//   simulated-user       another model plays the user (UserEndpoint): it
//                        knows the question and its answer, and replies to
//                        each wrong answer; as multi-turn-feedback otherwise
//   command              an outside agent program in any language, using
//                        any OpenAI client against the proxy; it prints the
//                        episode's reward (command_workflow.cc)
// Options are a JSON object read strictly (an unknown key or a wrong type is
// InvalidArgument naming "workflow.options.KEY").
//
// Run is called from many threads at once (one episode each) and must not
// keep state between episodes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "workers/agents/chat_client.h"
#include "workers/data/problem.h"
#include "workers/data/verifier.h"

namespace tandem::agents {

struct EpisodeContext {
  const data::Problem* problem = nullptr;
  const data::Verifier* verifier = nullptr;
  const ChatClient* model = nullptr;  // the trained model
  const ChatClient* user = nullptr;   // the simulated user, for a workflow with a user_endpoint()
  std::string session;                // the episode's session id at the proxy
  ChatParams params;                  // sampling of the model's turns
};

// Where a workflow's simulated user is served: a model served by tandem
// (rollout replicas started with --frozen-weights, their port files with
// "{rank}" for 0..replicas-1, and its model directory for the tokenizer),
// or an external OpenAI-compatible endpoint (http only), its API key read
// from a file whose name is given, never from the spec itself.
struct UserEndpoint {
  std::string port_file;
  int64_t replicas = 1;
  std::string tokenizer;
  std::string url;
  std::string api_key_file;
  std::string model = "tandem";  // the request's "model"
};

struct Episode {
  double reward = 0;
  bool solved = false;                // a right answer was given
  int64_t solved_turn = 0;            // at which model turn (1-based; 0: never)
  // One per model turn (chat call), in order: the reward that turn earned
  // (per-turn advantages, episode_tokens.h); their sum is `reward`.
  std::vector<double> turn_rewards;
  int64_t tool_calls = 0;             // tool calls answered
  int64_t tool_errors = 0;            // of which the tool refused (bad arguments)
};

class Workflow {
 public:
  virtual ~Workflow() = default;
  virtual std::string_view name() const = 0;
  virtual StatusOr<Episode> Run(const EpisodeContext& ctx) const = 0;
  // The simulated user this workflow talks to (EpisodeContext::user), if any.
  virtual const UserEndpoint* user_endpoint() const { return nullptr; }
  // The tools (ToolsNamed names) its first call offers with every prompt:
  // the prompt the model sees is rendered with them, and the actor's
  // --max-prompt-tokens counts that (roles::PromptTokensOffering).
  virtual std::vector<std::string> tool_names() const { return {}; }
};

// `spec`: "NAME" or {"name": NAME, "options": {...}}.
StatusOr<std::unique_ptr<Workflow>> MakeWorkflow(const nlohmann::json& spec);
std::vector<std::string> WorkflowNames();

// The key in an api_key_file (UserEndpoint): one line of printable ASCII,
// at most 4096 bytes, trailing newline and spaces dropped; InvalidArgument
// naming the file (never the key) otherwise.
StatusOr<std::string> ReadApiKey(const std::string& path);

// The messages of a problem's prompt as an OpenAI messages array.
nlohmann::json PromptMessages(const data::Problem& problem);

}  // namespace tandem::agents
