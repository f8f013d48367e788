// The calculator tool (calculator.h).
#include "workers/agents/calculator.h"

#include <cstdint>
#include <limits>
#include <numeric>

namespace tandem::agents {
namespace {

using Wide = __int128;

// A reduced fraction, den > 0.
struct Rational {
  int64_t num = 0, den = 1;
};

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  StatusOr<Rational> Parse() {
    TANDEM_ASSIGN_OR_RETURN(const Rational v, Expression(0));
    SkipSpaces();
    if (at_ != s_.size()) return Error(std::string("unexpected '") + s_[at_] + "'");
    return v;
  }

 private:
  Status Error(const std::string& what) const {
    return InvalidArgument("calculator: " + what + " at byte " + std::to_string(at_));
  }
  void SkipSpaces() {
    while (at_ < s_.size() && (s_[at_] == ' ' || s_[at_] == '\t' || s_[at_] == '\n')) ++at_;
  }

  StatusOr<Rational> Make(Wide num, Wide den) const {
    if (den == 0) return Error("division by zero");
    if (den < 0) num = -num, den = -den;
    Wide a = num < 0 ? -num : num, b = den;
    while (b != 0) {
      const Wide r = a % b;
      a = b;
      b = r;
    }
    if (a > 1) num /= a, den /= a;
    constexpr Wide kMax = std::numeric_limits<int64_t>::max();
    if (num > kMax || num < -kMax || den > kMax) return Error("a value beyond 64 bits");
    return Rational{static_cast<int64_t>(num), static_cast<int64_t>(den)};
  }

  StatusOr<Rational> Apply(char op, Rational a, Rational b) const {
    const Wide an = a.num, ad = a.den, bn = b.num, bd = b.den;
    switch (op) {
      case '+': return Make(an * bd + bn * ad, ad * bd);
      case '-': return Make(an * bd - bn * ad, ad * bd);
      case '*': return Make(an * bn, ad * bd);
      default: return Make(an * bd, ad * bn);  // '/'
    }
  }

  StatusOr<Rational> Expression(int depth) {
    TANDEM_ASSIGN_OR_RETURN(Rational v, Term(depth));
    for (;;) {
      SkipSpaces();
      if (at_ >= s_.size() || (s_[at_] != '+' && s_[at_] != '-')) return v;
      const char op = s_[at_++];
      TANDEM_ASSIGN_OR_RETURN(const Rational r, Term(depth));
      TANDEM_ASSIGN_OR_RETURN(v, Apply(op, v, r));
    }
  }

  StatusOr<Rational> Term(int depth) {
    TANDEM_ASSIGN_OR_RETURN(Rational v, Factor(depth));
    for (;;) {
      SkipSpaces();
      if (at_ >= s_.size() || (s_[at_] != '*' && s_[at_] != '/')) return v;
      const char op = s_[at_++];
      TANDEM_ASSIGN_OR_RETURN(const Rational r, Factor(depth));
      TANDEM_ASSIGN_OR_RETURN(v, Apply(op, v, r));
    }
  }

  StatusOr<Rational> Factor(int depth) {
    if (depth > kMaxCalculatorDepth) return Error("nesting deeper than " + std::to_string(kMaxCalculatorDepth));
    SkipSpaces();
    if (at_ >= s_.size()) return Error("a number expected, the expression ended");
    const char c = s_[at_];
    if (c == '-' || c == '+') {
      ++at_;
      TANDEM_ASSIGN_OR_RETURN(const Rational v, Factor(depth + 1));
      return c == '-' ? Make(-static_cast<Wide>(v.num), v.den) : v;
    }
    if (c == '(') {
      ++at_;
      TANDEM_ASSIGN_OR_RETURN(const Rational v, Expression(depth + 1));
      SkipSpaces();
      if (at_ >= s_.size() || s_[at_] != ')') return Error("')' expected");
      ++at_;
      return v;
    }
    return Number();
  }

  StatusOr<Rational> Number() {
    const size_t begin = at_;
    Wide num = 0, den = 1;
    bool digits = false, point = false;
    constexpr Wide kLimit = static_cast<Wide>(1) << 100;
    for (; at_ < s_.size(); ++at_) {
      const char c = s_[at_];
      if (c == '.' && !point) {
        point = true;
        continue;
      }
      if (c < '0' || c > '9') break;
      digits = true;
      num = num * 10 + (c - '0');
      if (point) den *= 10;
      if (num > kLimit || den > kLimit) return Error("a number beyond 64 bits");
    }
    if (!digits) {
      at_ = begin;
      return Error(begin < s_.size() ? std::string("a number expected, got '") + s_[begin] + "'" : "a number expected");
    }
    return Make(num, den);
  }

  std::string_view s_;
  size_t at_ = 0;
};

}  // namespace

nlohmann::json CalculatorToolJson() {
  using nlohmann::json;
  return {{"type", "function"},
          {"function",
           {{"name", "calculator"},
            {"description", "Evaluates an arithmetic expression exactly (+ - * / and parentheses)."},
            {"parameters",
             {{"type", "object"},
              {"properties", {{"expression", {{"type", "string"}, {"description", "e.g. (12 + 7) * 3"}}}}},
              {"required", {"expression"}}}}}}};
}

StatusOr<std::vector<Tool>> ToolsNamed(const std::vector<std::string>& names) {
  std::vector<Tool> out;
  for (const std::string& name : names) {
    if (name != "calculator") return InvalidArgument("tool \"" + name.substr(0, 60) + "\": unknown (tools: calculator)");
    // As sent over HTTP (keys sorted by the JSON writer) and parsed in order.
    out.push_back({name, nlohmann::ordered_json::parse(CalculatorToolJson().dump())});
  }
  return out;
}

StatusOr<std::string> Calculate(std::string_view expression) {
  if (expression.size() > kMaxCalculatorBytes)
    return InvalidArgument("calculator: the expression is " + std::to_string(expression.size()) + " bytes, at most " +
                           std::to_string(kMaxCalculatorBytes));
  TANDEM_ASSIGN_OR_RETURN(const Rational v, Parser(expression).Parse());
  if (v.den == 1) return std::to_string(v.num);
  return std::to_string(v.num) + "/" + std::to_string(v.den);
}

}  // namespace tandem::agents
