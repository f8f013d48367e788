// The built-in workflows' factories (workflow.h lists them and their
// options), for MakeWorkflow. Each reads its options strictly.
#pragma once

#include <memory>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "workers/agents/workflow.h"

namespace tandem::agents {

StatusOr<std::unique_ptr<Workflow>> MakeSingleTurn(const nlohmann::json& options);
StatusOr<std::unique_ptr<Workflow>> MakeFeedback(const nlohmann::json& options);
StatusOr<std::unique_ptr<Workflow>> MakeToolCalls(const nlohmann::json& options);
StatusOr<std::unique_ptr<Workflow>> MakeSimulatedUser(const nlohmann::json& options);
StatusOr<std::unique_ptr<Workflow>> MakeCommand(const nlohmann::json& options);

// A reward discount option: options[key], a number in (0, 1], else `fallback`.
StatusOr<double> DiscountOption(const nlohmann::json& options, const char* workflow, const char* key, double fallback);

// A turn's count option: options[key], an integer in [1, 64], else `fallback`.
StatusOr<int64_t> TurnsOption(const nlohmann::json& options, const char* workflow, const char* key, int64_t fallback);
// The problem's question: its last user message.
std::string Question(const data::Problem& problem);
// True when `reply` is a right answer to the problem (the verifier's reward >= 1).
bool RightAnswer(const EpisodeContext& ctx, const std::string& reply);

}  // namespace tandem::agents
