// The workflow registry and the single-turn workflow (workflow.h).
#include "workers/agents/workflow.h"

#include <cmath>

#include "workers/agents/builtin_workflows.h"
#include "workers/data/dataset_options.h"

namespace tandem::agents {
namespace {

using nlohmann::json;

class SingleTurn final : public Workflow {
 public:
  std::string_view name() const override { return "single-turn"; }
  StatusOr<Episode> Run(const EpisodeContext& ctx) const override {
    TANDEM_ASSIGN_OR_RETURN(const ChatReply reply,
                            ctx.model->Complete(PromptMessages(*ctx.problem), nullptr, ctx.params, ctx.session));
    Episode e;
    ScoreAnswer(ctx, reply.content, 1, 1.0, e);
    return e;
  }
};

struct Entry {
  const char* name;
  StatusOr<std::unique_ptr<Workflow>> (*make)(const json&);
};
constexpr Entry kWorkflows[] = {{"single-turn", MakeSingleTurn},
                                 {"multi-turn-feedback", MakeFeedback},
                                 {"tool-calls", MakeToolCalls},
                                 {"simulated-user", MakeSimulatedUser},
                                 {"command", MakeCommand}};

}  // namespace

StatusOr<std::unique_ptr<Workflow>> MakeSingleTurn(const json& options) {
  TANDEM_RETURN_IF_ERROR(data::DatasetOptions::Make("workflow single-turn", options, {}).status());
  return std::unique_ptr<Workflow>(std::make_unique<SingleTurn>());
}

StatusOr<int64_t> TurnsOption(const json& options, const char* workflow, const char* key, int64_t fallback) {
  if (!options.is_object() || !options.contains(key)) return fallback;
  const json& v = options[key];
  if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 64)
    return InvalidArgument(std::string("workflow ") + workflow + " options: key '" + key +
                           "': expected an integer in [1, 64], got " + v.dump().substr(0, 60));
  return v.get<int64_t>();
}

StatusOr<double> DiscountOption(const json& options, const char* workflow, const char* key, double fallback) {
  if (!options.is_object() || !options.contains(key)) return fallback;
  const json& d = options[key];
  if (!d.is_number() || !(d.get<double>() > 0) || !(d.get<double>() <= 1))
    return InvalidArgument(std::string("workflow ") + workflow + " options: key '" + key +
                           "': expected a number in (0, 1]");
  return d.get<double>();
}

std::string Question(const data::Problem& problem) {
  std::string question;
  for (const data::ChatMessage& m : problem.prompt)
    if (m.role == "user") question = m.content;
  return question;
}

bool ScoreAnswer(const EpisodeContext& ctx, const std::string& reply, int64_t turn, double discount, Episode& e) {
  if (ctx.verifier->Verify(reply, ctx.problem->answer).reward < 1.0) {
    e.turn_rewards.push_back(0.0);
    return false;
  }
  e.solved = true;
  e.solved_turn = turn;
  e.reward = std::pow(discount, static_cast<double>(turn - 1));
  e.turn_rewards.push_back(e.reward);
  return true;
}

json PromptMessages(const data::Problem& problem) {
  json out = json::array();
  for (const data::ChatMessage& m : problem.prompt) out.push_back({{"role", m.role}, {"content", m.content}});
  return out;
}

std::vector<std::string> WorkflowNames() {
  std::vector<std::string> out;
  for (const Entry& e : kWorkflows) out.emplace_back(e.name);
  return out;
}

StatusOr<std::unique_ptr<Workflow>> MakeWorkflow(const json& spec) {
  std::string name;
  json options = json::object();
  if (spec.is_string()) {
    name = spec.get<std::string>();
  } else if (spec.is_object()) {
    for (const auto& [k, v] : spec.items())
      if (k != "name" && k != "options") return InvalidArgument("workflow: unknown key '" + k + "' (expected name, options)");
    if (!spec.contains("name") || !spec["name"].is_string()) return InvalidArgument("workflow.name: expected a string");
    name = spec["name"].get<std::string>();
    if (spec.contains("options") && !spec["options"].is_null()) {
      if (!spec["options"].is_object()) return InvalidArgument("workflow.options: expected an object");
      options = spec["options"];
    }
  } else {
    return InvalidArgument("workflow: expected a name or {\"name\", \"options\"}");
  }
  for (const Entry& e : kWorkflows)
    if (name == e.name) return e.make(options);
  std::string names;
  for (const std::string& n : WorkflowNames()) names += (names.empty() ? "" : ", ") + n;
  return InvalidArgument("workflow: unknown name \"" + name.substr(0, 60) + "\" (expected one of " + names + ")");
}

}  // namespace tandem::agents
