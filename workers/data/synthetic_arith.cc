// Procedural arithmetic word problems (synthetic_arith.h).
#include "workers/data/synthetic_arith.h"

#include <algorithm>
#include <array>
#include <optional>
#include <string_view>

#include "workers/data/dataset_options.h"
#include "workers/data/seeded_random.h"

namespace tandem::data {
namespace {

constexpr std::array<std::string_view, 8> kNames{"Mia", "Leo", "Ava", "Sam", "Zoe", "Max", "Ivy", "Ben"};
constexpr std::array<std::string_view, 8> kItems{"apples", "books", "coins", "cards", "shells", "pens", "stamps", "marbles"};

enum class Op { kAdd, kSub, kMul, kDiv };
constexpr std::array<std::string_view, 4> kOpNames{"+", "-", "*", "/"};

// The operations a problem may use ("ops"), by Op.
using OpSet = std::array<bool, 4>;
bool Allows(const OpSet& ops, Op op) { return ops[static_cast<size_t>(op)]; }

struct Step {
  Op op;
  int64_t operand;
};

// Ranges of one level: the start value and the steps allowed.
struct Level {
  int64_t start_lo, start_hi;
  int steps;
  int64_t add_hi;  // add/sub operands in [1, add_hi] (level 1: from 0, level 2: from 10)
  int64_t mul_hi;  // multiplier in [2, mul_hi]; 0: no products
  bool division;
};

constexpr std::array<Level, kSyntheticArithMaxLevel> kLevels{{
    {0, 9, 1, 9, 0, false},
    {10, 99, 1, 99, 0, false},  // or a digit product, chosen below
    {1, 50, 2, 50, 5, false},
    {2, 100, 3, 100, 9, true},
    {10, 999, 4, 999, 9, true},
}};

std::string Show(int64_t v) { return std::to_string(v); }

// "1 apple", "3 apples" (every item name is a plural ending in 's').
std::string Count(int64_t n, const std::string& items) {
  return Show(n) + " " + (n == 1 ? items.substr(0, items.size() - 1) : items);
}

class SyntheticArith final : public Dataset {
 public:
  SyntheticArith(uint64_t seed, std::vector<int> levels, OpSet ops, bool word_style, std::optional<std::string> system,
                 std::unique_ptr<Verifier> verifier, double tool_calls)
      : seed_(seed), levels_(std::move(levels)), ops_(ops), word_(word_style), system_(std::move(system)),
        verifier_(std::move(verifier)), tool_calls_(tool_calls) {}

  std::string_view name() const override { return "synthetic-arith"; }
  std::optional<size_t> size() const override { return std::nullopt; }
  const Verifier& verifier() const override { return *verifier_; }

  // With every op allowed (the default) the draws are those of the data
  // set before "ops" existed: the same problems. With fewer, a step whose
  // op is not allowed is drawn again, and a problem that cannot go on (a
  // subtraction-only total at 0) is drawn again whole.
  StatusOr<Problem> Get(size_t index) const override {
    SeededRandom rng(seed_, static_cast<uint64_t>(index));
    for (int attempt = 0; attempt < 1000; ++attempt) {
      const int level = levels_[rng.Below(levels_.size())];
      const Level& lv = kLevels[static_cast<size_t>(level - 1)];
      int64_t start = rng.Between(lv.start_lo, lv.start_hi);
      std::vector<Step> steps;
      const bool add_or_sub = Allows(ops_, Op::kAdd) || Allows(ops_, Op::kSub);
      if (level == 2 && Allows(ops_, Op::kMul) && (!add_or_sub || rng.Below(3) == 0)) {  // a product of two digits
        start = rng.Between(2, 9);
        steps.push_back({Op::kMul, rng.Between(2, 9)});
      } else {
        int64_t total = start;
        for (int s = 0; s < lv.steps; ++s) {
          const std::optional<Step> step = DrawStep(rng, lv, level, total);
          if (!step) break;
          total = Apply(total, *step);
          steps.push_back(*step);
        }
        if (static_cast<int>(steps.size()) < lv.steps) continue;
      }
      return MakeProblem(index, rng, start, steps);
    }
    return Internal("synthetic-arith: no problem " + std::to_string(index) + " with these levels and ops in 1000 draws");
  }

 private:
  static int64_t Apply(int64_t total, const Step& s) {
    switch (s.op) {
      case Op::kAdd: return total + s.operand;
      case Op::kSub: return total - s.operand;
      case Op::kMul: return total * s.operand;
      case Op::kDiv: return total / s.operand;
    }
    return total;
  }

  // A step valid from `total` with an allowed op: subtraction never goes
  // below zero, division is exact, products stay small; none after 256 draws.
  std::optional<Step> DrawStep(SeededRandom& rng, const Level& lv, int level, int64_t total) const {
    const int64_t lo = level == 1 ? 0 : (level == 2 ? 10 : 1);
    for (int tries = 0; tries < 256; ++tries) {
      const uint64_t kind = rng.Below(lv.division ? 4 : (lv.mul_hi > 0 ? 3 : 2));
      if (!Allows(ops_, static_cast<Op>(kind))) continue;
      if (kind == 0) return Step{Op::kAdd, rng.Between(lo, lv.add_hi)};
      if (kind == 1 && total >= lo) return Step{Op::kSub, rng.Between(lo, std::min(total, lv.add_hi))};
      if (kind == 2 && total <= 200) return Step{Op::kMul, rng.Between(2, lv.mul_hi)};
      if (kind == 3 && total >= 2) {
        std::vector<int64_t> divisors;
        for (int64_t d = 2; d <= 9; ++d)
          if (total % d == 0) divisors.push_back(d);
        if (!divisors.empty()) return Step{Op::kDiv, divisors[rng.Below(divisors.size())]};
      }
    }
    return std::nullopt;
  }

  Problem MakeProblem(size_t index, SeededRandom& rng, int64_t start, const std::vector<Step>& steps) const {
    const std::string who(kNames[rng.Below(kNames.size())]);
    const std::string what(kItems[rng.Below(kItems.size())]);
    std::string question, solution, expression = Show(start);
    int64_t total = start;
    if (word_) question = who + " has " + Count(start, what) + ".";
    else question = steps.size() == 1 ? "What is " + Show(start) : "Start with " + Show(start);
    for (size_t s = 0; s < steps.size(); ++s) {
      const Step& st = steps[s];
      const int64_t next = Apply(total, st);
      const char* sym = st.op == Op::kAdd ? " + " : st.op == Op::kSub ? " - " : st.op == Op::kMul ? " * " : " / ";
      solution += Show(total) + sym + Show(st.operand) + " = " + Show(next) + "\n";
      const bool compound = expression.find_first_of("+-") != std::string::npos;
      if ((st.op == Op::kMul || st.op == Op::kDiv) && compound) expression = "(" + expression + ")";
      expression += sym + Show(st.operand);
      const std::string x = Show(st.operand);
      if (word_) {
        switch (st.op) {
          case Op::kAdd: question += " " + who + " finds " + Count(st.operand, what).insert(x.size(), " more") + "."; break;
          case Op::kSub: question += " " + who + " gives " + Count(st.operand, what) + " to a friend."; break;
          case Op::kMul: question += " Then " + who + " has " + x + " times as many " + what + "."; break;
          case Op::kDiv: question += " " + who + " splits the " + what + " into " + x + " equal groups and keeps one group."; break;
        }
      } else if (steps.size() == 1) {
        question += std::string(sym) + x + "?";
      } else {
        switch (st.op) {
          case Op::kAdd: question += ", add " + x; break;
          case Op::kSub: question += ", subtract " + x; break;
          case Op::kMul: question += ", multiply by " + x; break;
          case Op::kDiv: question += ", divide by " + x; break;
        }
      }
      total = next;
    }
    if (word_) question += " How many " + what + " does " + who + " have now?";
    else if (steps.size() > 1) question += ". What is the result?";
    solution += "Answer: " + Show(total);

    Problem p;
    p.id = "synthetic-arith:" + std::to_string(seed_) + ":" + std::to_string(index);
    if (system_) p.prompt.push_back({"system", *system_});
    p.prompt.push_back({"user", std::move(question)});
    p.answer = Show(total);
    p.reference_solution = std::move(solution);
    if (tool_calls_ > 0) {  // offered the calculator; a share of the references use it
      p.tools = {"calculator"};
      SeededRandom pick(seed_ ^ 0x746f6f6c5f63616cull, static_cast<uint64_t>(index));
      if (static_cast<double>(pick.Below(1000000)) < tool_calls_ * 1e6) {
        p.reference_turns = {
            {"assistant", "<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"" + expression +
                              "\"}}\n</tool_call>"},
            {"tool", p.answer},
            {"assistant", "Answer: " + p.answer}};  // read off the tool's answer, a few tokens back
      }
    }
    return p;
  }

  uint64_t seed_;
  std::vector<int> levels_;
  OpSet ops_;
  bool word_;
  std::optional<std::string> system_;
  std::unique_ptr<Verifier> verifier_;
  double tool_calls_;
};

StatusOr<std::vector<int>> ParseLevels(const nlohmann::json& v) {
  const std::string expected = "key 'level': expected an integer 1.." + std::to_string(kSyntheticArithMaxLevel) +
                               " or a non-empty list of them";
  auto one = [](const nlohmann::json& x) -> std::optional<int> {
    if (!x.is_number_integer()) return std::nullopt;
    const int64_t l = x.get<int64_t>();
    if (l < 1 || l > kSyntheticArithMaxLevel) return std::nullopt;
    return static_cast<int>(l);
  };
  if (v.is_null()) return std::vector<int>{1};
  if (const std::optional<int> l = one(v)) return std::vector<int>{*l};
  if (!v.is_array() || v.empty() || v.size() > 64) return InvalidArgument("synthetic-arith options: " + expected);
  std::vector<int> out;
  for (const nlohmann::json& x : v) {
    const std::optional<int> l = one(x);
    if (!l) return InvalidArgument("synthetic-arith options: " + expected);
    out.push_back(*l);
  }
  return out;
}

// "ops": a non-empty list of "+", "-", "*", "/" (default all), each level
// in `levels` able to use one of them (1: + -; 2, 3: + - *; 4, 5: all).
StatusOr<OpSet> ParseOps(const nlohmann::json& v, const std::vector<int>& levels) {
  if (v.is_null()) return OpSet{true, true, true, true};
  const std::string expected = "key 'ops': expected a non-empty list of \"+\", \"-\", \"*\", \"/\"";
  if (!v.is_array() || v.empty() || v.size() > 4) return InvalidArgument("synthetic-arith options: " + expected);
  OpSet ops{};
  for (const nlohmann::json& x : v) {
    const auto it = x.is_string() ? std::find(kOpNames.begin(), kOpNames.end(), x.get<std::string>()) : kOpNames.end();
    if (it == kOpNames.end()) return InvalidArgument("synthetic-arith options: " + expected);
    ops[static_cast<size_t>(it - kOpNames.begin())] = true;
  }
  for (const int level : levels) {
    const Level& lv = kLevels[static_cast<size_t>(level - 1)];
    const bool any = Allows(ops, Op::kAdd) || Allows(ops, Op::kSub) || (lv.mul_hi > 0 && Allows(ops, Op::kMul)) ||
                     (level == 2 && Allows(ops, Op::kMul)) || (lv.division && Allows(ops, Op::kDiv));
    if (!any)
      return InvalidArgument("synthetic-arith options: key 'ops': level " + std::to_string(level) +
                             " uses none of them (level 1: + -; 2, 3: + - *; 4, 5: + - * /)");
  }
  return ops;
}

}  // namespace

StatusOr<std::unique_ptr<Dataset>> OpenSyntheticArith(const nlohmann::json& options) {
  TANDEM_ASSIGN_OR_RETURN(const DatasetOptions opts, DatasetOptions::Make("synthetic-arith", options,
                                                                          {"seed", "level", "ops", "style", "system", "verifier",
                                                                           "tool_calls"}));
  TANDEM_ASSIGN_OR_RETURN(const std::optional<uint64_t> seed, opts.Unsigned("seed"));
  TANDEM_ASSIGN_OR_RETURN(std::vector<int> levels, ParseLevels(opts.Raw("level")));
  TANDEM_ASSIGN_OR_RETURN(const OpSet ops, ParseOps(opts.Raw("ops"), levels));
  TANDEM_ASSIGN_OR_RETURN(const std::string style, opts.Choice("style", {"word", "plain"}));
  TANDEM_ASSIGN_OR_RETURN(std::optional<std::string> system, opts.String("system"));
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Verifier> verifier, MakeVerifier("synthetic-arith", opts.Raw("verifier")),
                          "synthetic-arith options: key 'verifier'");
  double tool_calls = 0;
  if (const nlohmann::json t = opts.Raw("tool_calls"); !t.is_null()) {
    if (!t.is_number() || !(t.get<double>() >= 0) || !(t.get<double>() <= 1))
      return InvalidArgument("synthetic-arith options: key 'tool_calls': expected a number in [0, 1]");
    tool_calls = t.get<double>();
  }
  return std::unique_ptr<Dataset>(std::make_unique<SyntheticArith>(seed.value_or(0), std::move(levels), ops, style == "word",
                                                                   std::move(system), std::move(verifier), tool_calls));
}

}  // namespace tandem::data
