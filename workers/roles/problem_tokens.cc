// A problem's tokens for sft and its evals (problem_tokens.h).
#include "workers/roles/problem_tokens.h"

#include <limits>

#include "workers/agents/calculator.h"
#include "workers/agents/tool_chat_template.h"

namespace tandem::roles {
namespace {

std::vector<agents::Message> PromptMessages(const data::Problem& problem) {
  std::vector<agents::Message> out;
  for (const data::ChatMessage& m : problem.prompt) out.push_back({m.role, m.content, std::nullopt, {}, ""});
  return out;
}

}  // namespace

StatusOr<std::vector<int32_t>> ProblemPromptIds(const data::Tokenizer& tokenizer, const data::ChatFormat& format,
                                                const data::Problem& problem) {
  return PromptIdsOffering(tokenizer, format, problem, problem.tools);
}

StatusOr<std::vector<int32_t>> PromptIdsOffering(const data::Tokenizer& tokenizer, const data::ChatFormat& format,
                                                 const data::Problem& problem, const std::vector<std::string>& tools) {
  const std::string where = "problem " + problem.id;
  if (tools.empty()) {
    TANDEM_ASSIGN_OR_RETURN(data::EncodedChat chat, data::EncodeChat(tokenizer, format, problem.prompt, true), where);
    return std::vector<int32_t>(chat.ids.begin(), chat.ids.end());
  }
  TANDEM_ASSIGN_OR_RETURN(const std::vector<agents::Tool> offered, agents::ToolsNamed(tools), where);
  return agents::EncodeParts(tokenizer, agents::RenderParts(PromptMessages(problem), offered, 0, {}));
}

size_t PromptTokensOffering(const data::Tokenizer& tokenizer, const data::ChatFormat& format,
                            const data::Problem& problem, const std::vector<std::string>& tools) {
  StatusOr<std::vector<int32_t>> ids = PromptIdsOffering(tokenizer, format, problem, tools);
  return ids.ok() ? ids->size() : std::numeric_limits<size_t>::max();
}

StatusOr<train::SftExample> ProblemSftExample(const data::Tokenizer& tokenizer, const data::ChatFormat& format,
                                              const data::Problem& problem, data::TokenId end_token) {
  const std::string where = "problem " + problem.id;
  if (problem.tools.empty()) return train::MakeSftExample(tokenizer, format, problem, end_token);
  TANDEM_ASSIGN_OR_RETURN(const std::vector<agents::Tool> tools, agents::ToolsNamed(problem.tools), where);
  std::vector<agents::Message> messages = PromptMessages(problem);
  std::vector<data::ChatMessage> turns = problem.reference_turns;
  if (turns.empty()) {
    if (!problem.reference_solution) return FailedPrecondition(where + " has no reference solution to train on");
    turns = {{"assistant", *problem.reference_solution}};
  }
  if (turns.back().role != "assistant") return InvalidArgument(where + ": its reference conversation does not end with an answer");
  train::SftExample ex;
  TANDEM_ASSIGN_OR_RETURN(ex.ids, agents::EncodeParts(tokenizer, agents::RenderParts(messages, tools, 0, {})), where);
  ex.prompt_tokens = static_cast<int32_t>(ex.ids.size());
  for (size_t k = 0; k < turns.size();) {
    const data::ChatMessage& turn = turns[k];
    if (turn.role == "assistant") {  // what the model writes, and its end of turn
      TANDEM_ASSIGN_OR_RETURN(const std::vector<data::TokenId> said, tokenizer.Encode(turn.content), where);
      ex.ids.insert(ex.ids.end(), said.begin(), said.end());
      ex.ids.push_back(end_token);
      ex.trained.resize(ex.ids.size() - static_cast<size_t>(ex.prompt_tokens), 1);
      messages.push_back({"assistant", turn.content, std::nullopt, {}, ""});
      ++k;
      continue;
    }
    // The messages up to the next answer, as a call continuing the session renders them.
    const size_t next = messages.size();
    for (; k < turns.size() && turns[k].role != "assistant"; ++k)
      messages.push_back({turns[k].role, turns[k].content, std::nullopt, {}, ""});
    std::vector<agents::TemplatePart> parts = {{"\n", false}};
    for (agents::TemplatePart& p : agents::RenderParts(messages, tools, next, {})) parts.push_back(std::move(p));
    TANDEM_ASSIGN_OR_RETURN(const std::vector<int32_t> context, agents::EncodeParts(tokenizer, parts), where);
    ex.ids.insert(ex.ids.end(), context.begin(), context.end());
    ex.trained.resize(ex.ids.size() - static_cast<size_t>(ex.prompt_tokens), 0);
  }
  return ex;
}

}  // namespace tandem::roles
