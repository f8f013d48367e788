// The rule table of ordering_rules.h and its topological order.
#include "orchestrator/handoff/ordering_rules.h"

#include <array>

namespace tandem::handoff {
namespace {

using S = Stage;
constexpr std::array<OrderingRule, 14> kRules{{
    {"H1", S::kPause, S::kReleaseInference, "an inference role stops its work before it releases memory"},
    {"H2", S::kPause, S::kReleaseActor, "the actor stops its work before it releases memory"},
    {"H3", S::kReleaseInference, S::kResumeActor, "rollout and teachers release before the actor resumes"},
    {"H4", S::kReleaseActor, S::kResumeInference,
     "actor optimizer, grads and activations are released before any inference role resumes"},
    {"H5", S::kReleaseInference, S::kResumeInference,
     "one inference role (a teacher, the rollout) releases before another resumes"},
    {"H6", S::kPublish, S::kLoadWeights, "readers load a version only after it is published"},
    {"H7", S::kResumeInference, S::kLoadWeights, "a reader's weights memory is mapped before it loads"},
    {"H8", S::kLoadWeights, S::kReleaseExports,
     "IPC exports are freed only after every reader acknowledged load_weights"},
    {"H9", S::kPublish, S::kResumeGraphs, "CUDA graphs are restored only after weights are published"},
    {"H10", S::kLoadWeights, S::kResumeGraphs, "CUDA graphs are restored over loaded weights"},
    {"H11", S::kReleaseActor, S::kResumeGraphs, "no inference memory returns while actor training state is resident"},
    {"H12", S::kResumeActor, S::kContinue, "work continues only once its memory is in place"},
    {"H13", S::kResumeGraphs, S::kContinue, "work continues only once its memory is in place"},
    {"H14", S::kReleaseExports, S::kContinue, "the next phase starts with the exports freed"},
}};

std::vector<Stage> TopologicalOrder() {
  std::array<int, kStageCount> indegree{};
  for (const OrderingRule& r : kRules) indegree[static_cast<int>(r.after)]++;
  std::vector<Stage> order;
  std::array<bool, kStageCount> done{};
  for (int round = 0; round < kStageCount; ++round) {
    int pick = -1;
    for (int s = 0; s < kStageCount && pick < 0; ++s) {
      if (!done[s] && indegree[s] == 0) pick = s;
    }
    if (pick < 0) break;  // a cycle: StageOrder() comes back short; the test catches it
    done[pick] = true;
    order.push_back(static_cast<Stage>(pick));
    for (const OrderingRule& r : kRules) {
      if (static_cast<int>(r.before) == pick) indegree[static_cast<int>(r.after)]--;
    }
  }
  return order;
}

}  // namespace

std::string_view StageName(Stage s) {
  switch (s) {
    case Stage::kPause: return "pause";
    case Stage::kReleaseInference: return "release_inference";
    case Stage::kReleaseActor: return "release_actor";
    case Stage::kPublish: return "publish";
    case Stage::kResumeActor: return "resume_actor";
    case Stage::kResumeInference: return "resume_inference";
    case Stage::kLoadWeights: return "load_weights";
    case Stage::kReleaseExports: return "release_exports";
    case Stage::kResumeGraphs: return "resume_graphs";
    case Stage::kContinue: return "continue";
  }
  return "unknown";
}

std::span<const OrderingRule> OrderingRules() { return kRules; }

const std::vector<Stage>& StageOrder() {
  static const std::vector<Stage> order = TopologicalOrder();
  return order;
}

}  // namespace tandem::handoff
