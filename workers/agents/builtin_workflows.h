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
// Scores the model's answer at `turn` (1-based) into `e`: a right answer
// (the verifier's reward >= 1) solves the episode with discount^(turn-1)
// and returns true; a wrong one adds a turn reward of 0.
bool ScoreAnswer(const EpisodeContext& ctx, const std::string& reply, int64_t turn, double discount, Episode& e);

}  // namespace tandem::agents
