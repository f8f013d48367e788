// The ordering rules of a handoff (docs/handoff.md "Ordering rules"), as data.
//
// A transition into a phase runs in stages; every command of one stage is
// sent at once and the next stage starts only when all of them were
// acknowledged. The order of the stages is not written anywhere as code: it
// is the topological order of the rules below (each says "stage A before
// stage B" and why), ties broken by the enum's order. Each rule has an id
// (H1, H2, ...) that the Promela model (model/handoff.pml) carries on the
// transitions that enforce it; model_correspondence_test checks that.
#pragma once

#include <span>
#include <string_view>
#include <vector>

namespace tandem::handoff {

enum class Stage {
  kPause,             // pause workers that are running but not active in the target phase
  kReleaseInference,  // rollout and teacher release{tags}
  kReleaseActor,      // actor release{tags} except ipc_exports
  kPublish,           // actor publish_weights{v} (SYNC only)
  kResumeActor,       // actor resume{tags}
  kResumeInference,   // rollout and teacher resume{tags} except cuda_graph
  kLoadWeights,       // rollout load_weights{v} (SYNC only)
  kReleaseExports,    // actor release{ipc_exports}
  kResumeGraphs,      // rollout and teacher resume{cuda_graph}
  kContinue,          // continue the roles active in the target phase
};
inline constexpr int kStageCount = 10;
std::string_view StageName(Stage s);  // "pause", "release_inference", ...

struct OrderingRule {
  std::string_view id;  // "H1"
  Stage before;
  Stage after;
  std::string_view why;
};

// Every rule, in id order.
std::span<const OrderingRule> OrderingRules();

// The stages in the order the rules impose (a topological sort; ties by enum
// order). The rules are acyclic; ordering_rules_test checks it.
const std::vector<Stage>& StageOrder();

}  // namespace tandem::handoff
