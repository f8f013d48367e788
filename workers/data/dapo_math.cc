// The dapo-math loader (dapo_math.h).
#include "workers/data/dapo_math.h"

#include "common/bounded_json.h"
#include "workers/data/dataset_options.h"
#include "workers/data/jsonl_reader.h"
#include "workers/data/loaded_dataset.h"

namespace tandem::data {
namespace {

StatusOr<std::vector<ChatMessage>> ParsePrompt(const nlohmann::json& j) {
  const nlohmann::json* prompt = JsonAt(j, {"prompt"});
  if (prompt == nullptr) return InvalidArgument("key 'prompt': missing");
  if (!prompt->is_array() || prompt->empty())
    return InvalidArgument(std::string("key 'prompt': expected a non-empty array of messages, got ") +
                           (prompt->is_array() ? "an empty array" : prompt->type_name()));
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < prompt->size(); ++i) {
    const nlohmann::json& m = (*prompt)[i];
    const std::string at = "key 'prompt[" + std::to_string(i) + "]";
    if (!m.is_object()) return InvalidArgument(at + "': expected a message object, got " + m.type_name());
    ChatMessage msg;
    for (const char* field : {"role", "content"}) {
      const auto it = m.find(field);
      if (it == m.end()) return InvalidArgument(at + "." + field + "': missing");
      if (!it->is_string()) return InvalidArgument(at + "." + field + "': expected a string, got " + it->type_name());
      (std::string_view(field) == "role" ? msg.role : msg.content) = it->get<std::string>();
    }
    out.push_back(std::move(msg));
  }
  return out;
}

StatusOr<std::string> ParseGroundTruth(const nlohmann::json& j) {
  const nlohmann::json* v = JsonAt(j, {"reward_model", "ground_truth"});
  if (v == nullptr) return InvalidArgument("key 'reward_model.ground_truth': missing");
  if (v->is_string()) {
    if (v->get<std::string>().empty()) return InvalidArgument("key 'reward_model.ground_truth': empty");
    return v->get<std::string>();
  }
  if (v->is_number_integer() || v->is_number_unsigned()) return DumpJson(*v);
  return InvalidArgument(std::string("key 'reward_model.ground_truth': expected a string or an integer, got ") +
                         v->type_name());
}

}  // namespace

StatusOr<std::unique_ptr<Dataset>> OpenDapoMath(const nlohmann::json& options) {
  TANDEM_ASSIGN_OR_RETURN(const DatasetOptions opts,
                          DatasetOptions::Make("dapo-math", options, {"path", "limit", "on_bad_row", "verifier"}));
  TANDEM_ASSIGN_OR_RETURN(const std::optional<std::string> path, opts.String("path"));
  if (!path) return InvalidArgument("dapo-math options: key 'path': missing (the JSONL file)");
  TANDEM_ASSIGN_OR_RETURN(const std::optional<uint64_t> limit, opts.Unsigned("limit"));
  TANDEM_ASSIGN_OR_RETURN(const std::string on_bad_row, opts.Choice("on_bad_row", {"error", "skip"}));
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Verifier> verifier, MakeVerifier("dapo-math", opts.Raw("verifier")),
                          "dapo-math options: key 'verifier'");

  const std::string file = path->substr(path->find_last_of('/') == std::string::npos ? 0 : path->find_last_of('/') + 1);
  std::vector<Problem> problems;
  LoadReport report;
  auto row = [&](const nlohmann::json& j, size_t line) -> Status {
    if (!j.is_object()) return InvalidArgument(std::string("expected a JSON object, got ") + j.type_name());
    TANDEM_ASSIGN_OR_RETURN(std::vector<ChatMessage> prompt, ParsePrompt(j));
    TANDEM_ASSIGN_OR_RETURN(std::string truth, ParseGroundTruth(j));
    Problem p;
    const nlohmann::json* index = JsonAt(j, {"extra_info", "index"});
    p.id = (index != nullptr && index->is_string()) ? index->get<std::string>() : file + ":" + std::to_string(line);
    p.prompt = std::move(prompt);
    p.answer = std::move(truth);
    problems.push_back(std::move(p));
    return Status::Ok();
  };
  TANDEM_RETURN_IF_ERROR(ReadJsonl(*path, on_bad_row == "skip" ? BadRowPolicy::kSkip : BadRowPolicy::kError,
                                   limit ? std::optional<size_t>(*limit) : std::nullopt, row, &report),
                         "dapo-math");
  return std::unique_ptr<Dataset>(
      std::make_unique<LoadedDataset>("dapo-math", std::move(problems), std::move(verifier), std::move(report)));
}

}  // namespace tandem::data
