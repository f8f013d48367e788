// The calculator tool of the tool-calls workflow (workflow.h; docs/agents.md
// "Workflows"): an arithmetic expression, as a model writes it, evaluated
// exactly. Torch-free.
//
// Grammar: numbers (integers or decimals: "12", "3.25"), + - * /, unary
// minus and plus, parentheses, spaces. Arithmetic is on exact rationals
// (64-bit numerator and denominator, 128-bit intermediates): the value is
// written as an integer ("42", "-7") or a reduced fraction ("7/2"). Every
// byte is hostile: an expression over 256 bytes, nested over 32 levels, with
// any other character, dividing by zero, or leaving 64 bits is
// InvalidArgument naming what and where ("calculator: division by zero at
// byte 7"); nothing is ever thrown or recursed without bound.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "workers/agents/agent_message.h"

namespace tandem::agents {

inline constexpr size_t kMaxCalculatorBytes = 256;
inline constexpr int kMaxCalculatorDepth = 32;

StatusOr<std::string> Calculate(std::string_view expression);

// The calculator as an OpenAI function tool: {"type": "function",
// "function": {"name": "calculator", ...}} (its argument: "expression").
nlohmann::json CalculatorToolJson();

// The tools named by a problem (data::Problem::tools) as the proxy holds
// them after parsing a request that sends their JSON (so a prompt rendered
// with them is the proxy's); InvalidArgument for a name not known here
// (only "calculator").
StatusOr<std::vector<Tool>> ToolsNamed(const std::vector<std::string>& names);

}  // namespace tandem::agents
