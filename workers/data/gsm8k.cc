// The gsm8k loader (gsm8k.h).
#include "workers/data/gsm8k.h"

#include "workers/data/dataset_options.h"
#include "workers/data/jsonl_reader.h"
#include "workers/data/loaded_dataset.h"
#include "workers/data/number.h"

namespace tandem::data {

StatusOr<std::string> Gsm8kGroundTruth(std::string_view answer) {
  const size_t at = answer.rfind("####");
  if (at == std::string_view::npos) return InvalidArgument("no '####' line");
  std::string truth;
  for (const char c : answer.substr(at + 4))
    if (c != ',') truth.push_back(c);
  while (!truth.empty() && (truth.front() == ' ' || truth.front() == '\t')) truth.erase(truth.begin());
  while (!truth.empty() && (truth.back() == ' ' || truth.back() == '\t' || truth.back() == '\n' || truth.back() == '\r'))
    truth.pop_back();
  if (!ParseNumber(truth)) return InvalidArgument("'####' is followed by '" + truth + "', not a number");
  return truth;
}

StatusOr<std::unique_ptr<Dataset>> OpenGsm8k(const nlohmann::json& options) {
  TANDEM_ASSIGN_OR_RETURN(const DatasetOptions opts,
                          DatasetOptions::Make("gsm8k", options, {"path", "limit", "on_bad_row", "system", "verifier"}));
  TANDEM_ASSIGN_OR_RETURN(const std::optional<std::string> path, opts.String("path"));
  if (!path) return InvalidArgument("gsm8k options: key 'path': missing (the JSONL file)");
  TANDEM_ASSIGN_OR_RETURN(const std::optional<uint64_t> limit, opts.Unsigned("limit"));
  TANDEM_ASSIGN_OR_RETURN(const std::string on_bad_row, opts.Choice("on_bad_row", {"error", "skip"}));
  TANDEM_ASSIGN_OR_RETURN(const std::optional<std::string> system, opts.String("system"));
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Verifier> verifier, MakeVerifier("gsm8k", opts.Raw("verifier")),
                          "gsm8k options: key 'verifier'");

  const std::string file = path->substr(path->find_last_of('/') == std::string::npos ? 0 : path->find_last_of('/') + 1);
  std::vector<Problem> problems;
  LoadReport report;
  auto row = [&](const nlohmann::json& j, size_t line) -> Status {
    if (!j.is_object()) return InvalidArgument(std::string("expected a JSON object, got ") + j.type_name());
    TANDEM_ASSIGN_OR_RETURN(std::string question, JsonStringAt(j, {"question"}));
    TANDEM_ASSIGN_OR_RETURN(std::string answer, JsonStringAt(j, {"answer"}));
    TANDEM_ASSIGN_OR_RETURN(std::string truth, Gsm8kGroundTruth(answer), "key 'answer'");
    Problem p;
    p.id = file + ":" + std::to_string(line);
    if (system) p.prompt.push_back({"system", *system});
    p.prompt.push_back({"user", std::move(question)});
    p.answer = std::move(truth);
    p.reference_solution = std::move(answer);
    problems.push_back(std::move(p));
    return Status::Ok();
  };
  TANDEM_RETURN_IF_ERROR(ReadJsonl(*path, on_bad_row == "skip" ? BadRowPolicy::kSkip : BadRowPolicy::kError,
                                   limit ? std::optional<size_t>(*limit) : std::nullopt, row, &report),
                         "gsm8k");
  return std::unique_ptr<Dataset>(
      std::make_unique<LoadedDataset>("gsm8k", std::move(problems), std::move(verifier), std::move(report)));
}

}  // namespace tandem::data
