// tool-calls (workflow.h): the model may call the calculator (calculator.h)
// in Qwen's <tool_call> format; the proxy parses the calls, each is answered
// as a `tool` message (its value, or "error: ..." for a bad call), and the
// session goes on until an answer without tool calls or max_turns model
// turns (default 4). The reward is the verifier's on that answer.
#include "workers/agents/builtin_workflows.h"
#include "workers/agents/calculator.h"
#include "workers/data/dataset_options.h"

namespace tandem::agents {
namespace {

using nlohmann::json;

// The tool's answer to one call: the value, or "error: ..." (counted).
std::string Answer(const ToolCall& call, Episode& e) {
  ++e.tool_calls;
  auto error = [&e](const std::string& why) {
    ++e.tool_errors;
    return "error: " + why;
  };
  if (call.name != "calculator") return error("no tool named \"" + call.name.substr(0, 60) + "\" (tools: calculator)");
  const json args = json::parse(call.arguments, nullptr, /*allow_exceptions=*/false);
  if (!args.is_object() || !args.contains("expression") || !args["expression"].is_string())
    return error("expected arguments {\"expression\": \"...\"}");
  StatusOr<std::string> value = Calculate(args["expression"].get<std::string>());
  if (!value.ok()) return error(value.status().message());
  return *value;
}

class ToolCalls final : public Workflow {
 public:
  explicit ToolCalls(int64_t max_turns) : max_turns_(max_turns), tools_(json::array({CalculatorToolJson()})) {}
  std::string_view name() const override { return "tool-calls"; }
  std::vector<std::string> tool_names() const override { return {"calculator"}; }

  StatusOr<Episode> Run(const EpisodeContext& ctx) const override {
    json messages = PromptMessages(*ctx.problem);
    Episode e;
    for (int64_t turn = 1; turn <= max_turns_; ++turn) {
      TANDEM_ASSIGN_OR_RETURN(const ChatReply reply, ctx.model->Complete(messages, tools_, ctx.params, ctx.session),
                              "turn " + std::to_string(turn));
      if (reply.tool_calls.empty()) {
        ScoreAnswer(ctx, reply.content, turn, 1.0, e);
        return e;
      }
      e.turn_rewards.push_back(0.0);
      messages.push_back(reply.message);
      for (const ToolCall& call : reply.tool_calls)
        messages.push_back({{"role", "tool"}, {"tool_call_id", call.id}, {"content", Answer(call, e)}});
    }
    return e;  // still calling tools after max_turns: no answer
  }

 private:
  int64_t max_turns_;
  json tools_;
};

}  // namespace

StatusOr<std::unique_ptr<Workflow>> MakeToolCalls(const json& options) {
  TANDEM_RETURN_IF_ERROR(data::DatasetOptions::Make("workflow tool-calls", options, {"max_turns"}).status());
  TANDEM_ASSIGN_OR_RETURN(const int64_t turns, TurnsOption(options, "tool-calls", "max_turns", 4));
  return std::unique_ptr<Workflow>(std::make_unique<ToolCalls>(turns));
}

}  // namespace tandem::agents
