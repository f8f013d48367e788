// The math-answer verifier and the verifier registry (verifier.h).
#include "workers/data/verifier.h"

#include <array>

#include "workers/data/final_answer.h"
#include "workers/data/number.h"

namespace tandem::data {
namespace {

std::string NormaliseText(std::string_view s) {
  std::string out;
  for (const char c : s)
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '$') out.push_back(c);
  while (!out.empty() && out.back() == '.') out.pop_back();
  return out;
}

struct VerifierRow {
  std::string_view name;
  AnswerFallback default_fallback;
};

constexpr std::array<VerifierRow, 3> kVerifiers{{
    {"synthetic-arith", AnswerFallback::kNone},
    {"gsm8k", AnswerFallback::kLastNumber},
    {"dapo-math", AnswerFallback::kNone},
}};

}  // namespace

Verdict MathAnswerVerifier::Verify(std::string_view response, std::string_view ground_truth) const {
  Verdict v;
  std::string_view answer;
  if (const std::optional<FinalAnswer> fa = FindFinalAnswer(response)) {
    answer = fa->text;
    v.how = std::string(AnswerMarkerName(fa->marker));
  } else if (fallback_ == AnswerFallback::kLastNumber) {
    const std::vector<NumberToken> numbers = ScanNumbers(response);
    if (numbers.empty()) {
      v.how = "none";
      return v;
    }
    answer = response.substr(numbers.back().begin, numbers.back().end - numbers.back().begin);
    v.how = "last-number";
  } else {
    v.how = "none";
    return v;
  }
  v.extracted = std::string(answer);
  if (const std::optional<Rational> truth = ParseNumber(ground_truth)) {
    const std::vector<NumberToken> numbers = ScanNumbers(answer);
    v.reward = (!numbers.empty() && numbers.front().value && *numbers.front().value == *truth) ? 1.0 : 0.0;
  } else {
    const std::string want = NormaliseText(ground_truth);
    v.reward = (!want.empty() && NormaliseText(answer) == want) ? 1.0 : 0.0;
  }
  return v;
}

StatusOr<std::unique_ptr<Verifier>> MakeVerifier(std::string_view name, const nlohmann::json& options) {
  const VerifierRow* row = nullptr;
  for (const VerifierRow& r : kVerifiers)
    if (r.name == name) row = &r;
  if (row == nullptr) {
    std::string names;
    for (const VerifierRow& r : kVerifiers) {
      if (!names.empty()) names += ", ";
      names += r.name;
    }
    return InvalidArgument("unknown verifier '" + std::string(name) + "' (known: " + names + ")");
  }
  AnswerFallback fallback = row->default_fallback;
  if (!options.is_null()) {
    if (!options.is_object()) return InvalidArgument("verifier options: expected a JSON object");
    for (const auto& [key, value] : options.items()) {
      if (key != "fallback")
        return InvalidArgument("verifier options: unknown key '" + key + "' (known: fallback)");
      if (!value.is_string() || (value.get<std::string>() != "last_number" && value.get<std::string>() != "none"))
        return InvalidArgument("verifier options: key 'fallback': expected \"last_number\" or \"none\"");
      fallback = value.get<std::string>() == "none" ? AnswerFallback::kNone : AnswerFallback::kLastNumber;
    }
  }
  return std::unique_ptr<Verifier>(std::make_unique<MathAnswerVerifier>(std::string(row->name), fallback));
}

std::vector<std::string> VerifierNames() {
  std::vector<std::string> out;
  for (const VerifierRow& r : kVerifiers) out.emplace_back(r.name);
  return out;
}

}  // namespace tandem::data
