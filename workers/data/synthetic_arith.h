// The synthetic-arith data set (docs/model.md, "Data sets and rewards",
// "synthetic-arith"): procedural arithmetic word problems with exact integer
// answers, unbounded (any index), the same problem for the same (seed,
// index) on every machine. Difficulty levels:
//   1: one addition or subtraction of numbers 0..9 (result >= 0);
//   2: one step with numbers 10..99 (+, -) or a product of two digits;
//   3: two steps (+, -, x small) from a start of 1..50;
//   4: three steps including exact division;
//   5: four steps, numbers up to 999.
// Every intermediate result is a non-negative integer. The reference
// solution is one line per step ("3 + 4 = 7") and then the answer line
// "Answer: 7", which the synthetic-arith verifier requires.
//
// Options: {"seed": integer (default 0), "level": 1..5 or a list of levels
// (each problem's level drawn uniformly; default 1), "ops": a list of "+",
// "-", "*", "/" the problems may use (default all; level 2 with only "*"
// is the digit products, with only "+" the two-digit sums), "style": "word"
// (default: "Mia has 3 apples. Mia finds 4 more apples. How many apples does
// Mia have now?") | "plain" ("What is 3 + 4?"), "system": a system prompt,
// "verifier": options of the synthetic-arith verifier, "tool_calls": a
// share in [0, 1] (default 0): above 0 every problem offers the calculator
// tool (Problem::tools) and that share of them (drawn per index, apart
// from the problem's own draws) has a reference conversation that calls it
// with the whole expression ("(3 + 4) * 2") and answers "Answer: V" with
// the value the tool gave (Problem::reference_turns; docs/agents.md)}.
#pragma once

#include <memory>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "workers/data/dataset.h"

namespace tandem::data {

inline constexpr int kSyntheticArithMaxLevel = 5;

StatusOr<std::unique_ptr<Dataset>> OpenSyntheticArith(const nlohmann::json& options);

}  // namespace tandem::data
