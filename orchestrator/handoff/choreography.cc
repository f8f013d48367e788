// docs/handoff.md's default choreography and the group lookups (choreography.h).
#include "orchestrator/handoff/choreography.h"

namespace tandem::handoff {

std::string_view OnFaultName(OnFault f) { return f == OnFault::kFail ? "fail" : "restart"; }

Choreography DefaultChoreography() {
  using K = RoleKind;
  const TagSet inference_all{Tag::kWeights, Tag::kKvCache, Tag::kCudaGraph};
  const TagSet actor_all{Tag::kParams, Tag::kGrads, Tag::kOptimizer, Tag::kActivations, Tag::kIpcExports};
  Choreography c;
  c.phases[PhaseKind::kRollout] = PhasePlan{
      .release = {{K::kActor, actor_all}, {K::kTeacher, inference_all}},
      .resume = {{K::kRollout, inference_all}}};
  c.phases[PhaseKind::kTeacher] = PhasePlan{
      .release = {{K::kActor, actor_all}, {K::kRollout, inference_all}, {K::kTeacher, inference_all}},
      .resume = {{K::kTeacher, {Tag::kWeights}}}};
  c.phases[PhaseKind::kTrain] = PhasePlan{
      .release = {{K::kRollout, inference_all}, {K::kTeacher, inference_all}},
      .resume = {{K::kActor, {Tag::kParams, Tag::kGrads, Tag::kOptimizer}}}};
  c.phases[PhaseKind::kSync] = PhasePlan{
      .release = {{K::kActor, {Tag::kOptimizer, Tag::kGrads, Tag::kActivations, Tag::kIpcExports}}},
      .resume = {{K::kRollout, {Tag::kWeights}}}};
  return c;
}

const GroupRole* GroupConfig::FindRole(std::string_view name) const {
  for (const GroupRole& r : roles) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

std::string GroupConfig::TeacherName(int index) const {
  int i = 0;
  for (const GroupRole& r : roles) {
    if (r.kind != RoleKind::kTeacher) continue;
    if (i++ == index) return r.name;
  }
  return "";
}

int GroupConfig::TeacherCount() const {
  int n = 0;
  for (const GroupRole& r : roles) n += r.kind == RoleKind::kTeacher;
  return n;
}

}  // namespace tandem::handoff
