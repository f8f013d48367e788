// Names of the handoff vocabulary (types.h); they are the wire and log names.
#include "orchestrator/handoff/types.h"

#include <fmt/format.h>

namespace tandem::handoff {

std::string_view TagName(Tag t) {
  switch (t) {
    case Tag::kWeights: return "weights";
    case Tag::kKvCache: return "kv_cache";
    case Tag::kCudaGraph: return "cuda_graph";
    case Tag::kParams: return "params";
    case Tag::kGrads: return "grads";
    case Tag::kOptimizer: return "optimizer";
    case Tag::kActivations: return "activations";
    case Tag::kIpcExports: return "ipc_exports";
  }
  return "unknown";
}

std::optional<Tag> ParseTag(std::string_view name) {
  for (Tag t : {Tag::kWeights, Tag::kKvCache, Tag::kCudaGraph, Tag::kParams, Tag::kGrads,
                Tag::kOptimizer, Tag::kActivations, Tag::kIpcExports}) {
    if (TagName(t) == name) return t;
  }
  return std::nullopt;
}

std::string TagSetName(const TagSet& tags) {
  std::string out;
  for (Tag t : tags) {
    if (!out.empty()) out += ',';
    out += TagName(t);
  }
  return out;
}

std::string_view RoleKindName(RoleKind k) {
  switch (k) {
    case RoleKind::kActor: return "actor";
    case RoleKind::kRollout: return "rollout";
    case RoleKind::kTeacher: return "teacher";
  }
  return "unknown";
}

std::optional<RoleKind> ParseRoleKind(std::string_view name) {
  for (RoleKind k : {RoleKind::kActor, RoleKind::kRollout, RoleKind::kTeacher}) {
    if (RoleKindName(k) == name) return k;
  }
  return std::nullopt;
}

std::string PhaseName(const Phase& p) {
  switch (p.kind) {
    case PhaseKind::kInit: return "INIT";
    case PhaseKind::kRollout: return "ROLLOUT";
    case PhaseKind::kTeacher: return fmt::format("TEACHER({})", p.teacher);
    case PhaseKind::kTrain: return "TRAIN";
    case PhaseKind::kSync: return fmt::format("SYNC({})", p.version);
  }
  return "UNKNOWN";
}

std::string WorkerId::ToString() const { return fmt::format("{}/{}", role, rank); }

std::string_view CommandKindName(CommandKind k) {
  switch (k) {
    case CommandKind::kPause: return "pause";
    case CommandKind::kRelease: return "release";
    case CommandKind::kResume: return "resume";
    case CommandKind::kPublishWeights: return "publish_weights";
    case CommandKind::kLoadWeights: return "load_weights";
    case CommandKind::kContinue: return "continue";
  }
  return "unknown";
}

}  // namespace tandem::handoff
