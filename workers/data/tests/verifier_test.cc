// Number parsing, final-answer markers and the math verifiers, as tables
// with adversarial answers (docs/model.md, "Data sets and rewards").
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "workers/data/final_answer.h"
#include "workers/data/number.h"
#include "workers/data/verifier.h"

namespace tandem::data {
namespace {

TEST(Number, ParsesEqualByValue) {
  struct Row { const char* text; int64_t num, den; };
  const Row rows[] = {
      {"42", 42, 1},          {"-42", -42, 1},         {"+42", 42, 1},          {"1,234", 1234, 1},
      {"1,234,567", 1234567, 1}, {"$1,000.50", 2001, 2}, {"0.5", 1, 2},         {".5", 1, 2},
      {"1/2", 1, 2},          {"2/4", 1, 2},           {"-3/4", -3, 4},         {"\\frac{3}{4}", 3, 4},
      {"\\dfrac{6}{8}", 3, 4}, {"-\\frac{1}{2}", -1, 2}, {"\\frac{-1}{2}", -1, 2}, {"\\frac{1.5}{3}", 1, 2},
      {"3.50", 7, 2},         {"007", 7, 1},           {"50%", 50, 1},          {"12.", 12, 1},
      {"\xE2\x88\x92" "5", -5, 1},  // U+2212 minus
      {"  7  ", 7, 1},
  };
  for (const Row& r : rows) {
    const std::optional<Rational> v = ParseNumber(r.text);
    ASSERT_TRUE(v.has_value()) << r.text;
    EXPECT_EQ(*v, (Rational{r.num, r.den})) << r.text << " -> " << ToString(*v);
  }
}

TEST(Number, RefusesWhatIsNotOneNumber) {
  for (const char* text : {"", "abc", "1 2", "1,2", "12,34", "1/0", "\\frac{1}{0}", "3 apples", "x=3", "--3",
                           "99999999999999999999", "\\frac{1}{", "1e5", "2^{10}"})
    EXPECT_FALSE(ParseNumber(text).has_value()) << text;
}

TEST(Number, ScansInReadingOrder) {
  const std::string text = "5-3 = 2, then -4 and 1,234 or 1,23; 10/5 and 2.5.";
  std::vector<std::string> values;
  for (const NumberToken& t : ScanNumbers(text)) values.push_back(t.value ? ToString(*t.value) : "?");
  EXPECT_EQ(values, (std::vector<std::string>{"5", "3", "2", "-4", "1234", "1", "23", "2", "5/2"}));
}

TEST(Number, OverflowIsFoundWithoutValue) {
  const std::vector<NumberToken> t = ScanNumbers("x 123456789012345678901234567890 y");
  ASSERT_EQ(t.size(), 1u);
  EXPECT_FALSE(t[0].value.has_value());
  EXPECT_EQ(t[0].end - t[0].begin, 30u);
}

TEST(FinalAnswer, LastMarkerWins) {
  struct Row { const char* response; const char* text; AnswerMarker marker; };
  const Row rows[] = {
      {"so \\boxed{5}", "5", AnswerMarker::kBoxed},
      {"\\boxed{5} and later \\boxed{6}", "6", AnswerMarker::kBoxed},
      {"\\boxed{\\boxed{7}}", "7", AnswerMarker::kBoxed},
      {"\\boxed{\\frac{1}{2}}", "\\frac{1}{2}", AnswerMarker::kBoxed},
      {"\\boxed{ {3} }", "{3}", AnswerMarker::kBoxed},
      {"\\fbox{8}", "8", AnswerMarker::kBoxed},
      {"work\n#### 72", "72", AnswerMarker::kHashes},
      {"#### 4\nno wait\n#### 5", "5", AnswerMarker::kHashes},
      {"Answer: 12", "12", AnswerMarker::kAnswerLine},
      {"**Final Answer:** 12 apples", "12 apples", AnswerMarker::kAnswerLine},
      {"The answer is 9.", "9.", AnswerMarker::kAnswerLine},
      {"Answer: \\boxed{3}", "3", AnswerMarker::kBoxed},
      {"\\boxed{3}\nAnswer: 4", "4", AnswerMarker::kAnswerLine},
      {"#### 1\nAnswer: 2\n\\boxed{3}", "3", AnswerMarker::kBoxed},
      {"\\boxed{5 and \\boxed{6} unclosed \\boxed{7", "6", AnswerMarker::kBoxed},  // outer never closes
  };
  for (const Row& r : rows) {
    const std::optional<FinalAnswer> fa = FindFinalAnswer(r.response);
    ASSERT_TRUE(fa.has_value()) << r.response;
    EXPECT_EQ(fa->text, r.text) << r.response;
    EXPECT_EQ(fa->marker, r.marker) << r.response;
  }
}

TEST(FinalAnswer, NoneOrMalformed) {
  for (const char* response : {"", "just 5 and 6", "\\boxed{5", "\\boxed 5", "\\boxed{}", "####\n", "Answer:\n7",
                               "answers: 5", "The answered 5", "no marker at all"})
    EXPECT_FALSE(FindFinalAnswer(response).has_value()) << response;
}

TEST(FinalAnswer, DeepNestingAndManyUnclosedBoxesAreLinear) {
  std::string deep;
  for (int i = 0; i < 100'000; ++i) deep += "\\boxed{";
  deep += "42";
  for (int i = 0; i < 100'000; ++i) deep += "}";
  const auto t0 = std::chrono::steady_clock::now();
  const std::optional<FinalAnswer> fa = FindFinalAnswer(deep);
  ASSERT_TRUE(fa.has_value());
  EXPECT_EQ(fa->text, "42");
  std::string unclosed;
  for (int i = 0; i < 100'000; ++i) unclosed += "\\boxed{1 ";
  EXPECT_FALSE(FindFinalAnswer(unclosed).has_value());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

double Reward(std::string_view verifier, std::string_view response, std::string_view truth,
              const nlohmann::json& options = nullptr) {
  StatusOr<std::unique_ptr<Verifier>> v = MakeVerifier(verifier, options);
  EXPECT_TRUE(v.ok()) << v.status().ToString();
  return (*v)->Verify(response, truth).reward;
}

TEST(Verifier, MathTable) {
  struct Row { const char* verifier; const char* response; const char* truth; double reward; };
  const Row rows[] = {
      // Normalisation: commas, signs, decimals, fractions, units, periods.
      {"gsm8k", "#### 1,234", "1234", 1},
      {"gsm8k", "#### 1234", "1,234", 1},
      {"gsm8k", "#### $1,234.00 dollars.", "1234", 1},
      {"gsm8k", "#### -7", "-7", 1},
      {"gsm8k", "#### +7", "7", 1},
      {"gsm8k", "#### 7", "-7", 0},
      {"dapo-math", "Answer: 0.5", "1/2", 1},
      {"dapo-math", "Answer: \\frac{2}{4}", "0.5", 1},
      {"dapo-math", "Answer: \\boxed{\\dfrac{1}{2}}", "\\frac{1}{2}", 1},
      {"dapo-math", "Answer: 50%", "50", 1},
      {"dapo-math", "Answer: 18 cm.", "18", 1},
      // Several numbers: the last marker wins, then its first number.
      {"gsm8k", "#### 4\nactually\n#### 5", "5", 1},
      {"gsm8k", "#### 4\nactually\n#### 5", "4", 0},
      {"dapo-math", "Answer: 5 or 6", "6", 0},
      {"dapo-math", "\\boxed{3}\nAnswer: 4", "4", 1},
      {"dapo-math", "Answer: \\boxed{3}", "3", 1},
      // No marker: gsm8k takes the last number, the others give 0.
      {"gsm8k", "she has 3 then 8 apples", "8", 1},
      {"gsm8k", "she has 8 then 3 apples", "8", 0},
      {"gsm8k", "no numbers here", "8", 0},
      {"synthetic-arith", "3 + 4 = 7", "7", 0},
      {"synthetic-arith", "3 + 4 = 7\nAnswer: 7", "7", 1},
      {"dapo-math", "the result is 34", "34", 0},
      // Malformed boxes are ignored.
      {"dapo-math", "\\boxed{34", "34", 0},
      {"gsm8k", "\\boxed{34", "34", 1},  // gsm8k falls back to the last number
      {"dapo-math", "\\boxed{}", "0", 0},
      // A marker whose text holds no number.
      {"dapo-math", "Answer: I do not know", "3", 0},
      {"dapo-math", "Answer: 2^{10}", "1024", 0},  // no expression evaluation
      // Huge numbers: no value, so no match, unless the truth is the same text.
      {"dapo-math", "Answer: 123456789012345678901234567890", "5", 0},
      {"dapo-math", "Answer: 123456789012345678901234567890", "123456789012345678901234567890", 1},
      // A ground truth that is not a number: text equality without spaces and '$'.
      {"dapo-math", "Answer: $\\sqrt{2}$", "\\sqrt{2}", 1},
      {"dapo-math", "Answer: \\sqrt{3}", "\\sqrt{2}", 0},
      {"dapo-math", "Answer: ", "", 0},
  };
  for (const Row& r : rows)
    EXPECT_EQ(Reward(r.verifier, r.response, r.truth), r.reward) << r.verifier << " | " << r.response << " | " << r.truth;
}

TEST(Verifier, VerdictSaysWhatWasExtractedAndHow) {
  StatusOr<std::unique_ptr<Verifier>> v = MakeVerifier("gsm8k", nullptr);
  ASSERT_TRUE(v.ok());
  Verdict d = (*v)->Verify("so the total is 12 and then 15", "15");
  EXPECT_EQ(d.how, "last-number");
  EXPECT_EQ(d.extracted, "15");
  d = (*v)->Verify("#### 7", "7");
  EXPECT_EQ(d.how, "####");
  d = (*v)->Verify("nothing", "7");
  EXPECT_EQ(d.how, "none");
  EXPECT_FALSE(d.extracted.has_value());
}

TEST(Verifier, FallbackOptionAndRegistryErrors) {
  EXPECT_EQ(Reward("gsm8k", "it is 8", "8", {{"fallback", "none"}}), 0);
  EXPECT_EQ(Reward("dapo-math", "it is 8", "8", {{"fallback", "last_number"}}), 1);
  StatusOr<std::unique_ptr<Verifier>> bad = MakeVerifier("nope", nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("known: synthetic-arith, gsm8k, dapo-math"), std::string::npos);
  bad = MakeVerifier("gsm8k", {{"fallbak", "none"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unknown key 'fallbak'"), std::string::npos);
  bad = MakeVerifier("gsm8k", {{"fallback", 3}});
  ASSERT_FALSE(bad.ok());
  bad = MakeVerifier("gsm8k", nlohmann::json::array());
  ASSERT_FALSE(bad.ok());
}

}  // namespace
}  // namespace tandem::data
