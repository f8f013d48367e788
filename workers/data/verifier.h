// Verifiers: score a model's response against a problem's ground truth
// (docs/model.md, "Data sets and rewards", "Verifiers"). One per data set,
// by the data set's name, in a registry (MakeVerifier); each returns a
// reward of 1 (correct) or 0.
//
// The math verifier (all three data sets today): the response's final answer
// is the winning marker of final_answer.h; with no marker, the `fallback`
// option decides: "last_number" takes the response's last number,
// "none" gives reward 0. When the ground truth is a number (number.h), the
// first number of the final answer must equal it by value ("1,234" = "1234",
// "0.5" = "1/2" = "\frac{1}{2}", "+3" = "3"; trailing units, '$', '%' and
// periods do not matter); several numbers in the answer: the first counts.
// Otherwise (a ground truth that is not one number, "\sqrt{2}"), the answer
// text and the ground truth must be equal once spaces, '$' and a trailing
// '.' are removed. Verify never fails: an unparsable response scores 0.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tandem::data {

struct Verdict {
  double reward = 0;
  // The answer as extracted from the response (the marker's text, or the
  // last number), nullopt when the response states none.
  std::optional<std::string> extracted;
  // How it was found: "boxed", "####", "answer-line", "last-number", "none".
  std::string how;
};

class Verifier {
 public:
  virtual ~Verifier() = default;
  virtual std::string_view name() const = 0;
  virtual Verdict Verify(std::string_view response, std::string_view ground_truth) const = 0;
};

enum class AnswerFallback { kLastNumber, kNone };

// The math-answer verifier described above.
class MathAnswerVerifier final : public Verifier {
 public:
  MathAnswerVerifier(std::string name, AnswerFallback fallback) : name_(std::move(name)), fallback_(fallback) {}
  std::string_view name() const override { return name_; }
  Verdict Verify(std::string_view response, std::string_view ground_truth) const override;

 private:
  std::string name_;
  AnswerFallback fallback_;
};

// The verifier registered as `name` (a data set name: "synthetic-arith",
// "gsm8k", "dapo-math"), with `options` (a JSON object, null for the
// defaults): {"fallback": "last_number" | "none"}. Defaults: gsm8k
// "last_number"; synthetic-arith and dapo-math "none" (their prompts and
// reference solutions end in an "Answer:" line). Unknown names or keys are
// InvalidArgument naming what is accepted.
StatusOr<std::unique_ptr<Verifier>> MakeVerifier(std::string_view name, const nlohmann::json& options);
std::vector<std::string> VerifierNames();

}  // namespace tandem::data
