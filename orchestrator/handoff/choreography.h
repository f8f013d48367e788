// What a colocation group is made of and which tags each role releases and
// resumes in each phase (docs/handoff.md "Choreography"; the job spec's
// `handoff` section, schemas/jobspec.schema.json, docs/handoff.md).
//
// DefaultChoreography() is docs/handoff.md's: rollout pauses and releases
// kv_cache, cuda_graph, weights before the actor resumes; the actor releases
// optimizer, grads, activations in SYNC before the rollout resumes weights;
// exports are released after every reader loaded; CUDA graphs come back
// only after publication; teachers get their own phases and release before
// training. In a TEACHER(i) phase the teacher roles' `release` entries
// apply to every teacher except teacher i, and their `resume` entries to
// teacher i only.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "orchestrator/handoff/types.h"

namespace tandem::handoff {

enum class OnFault { kFail, kRestart };
std::string_view OnFaultName(OnFault f);  // "fail", "restart"

// What a phase the ledger refuses (it would not fit) does to the group. The
// job spec's `on_fault` decides: "fail", given explicitly, fails the group
// (the job); "restart", or no `on_fault`, lets the job go on: the requester
// is told and the group settles in no phase (docs/handoff.md "Refusals").
enum class OnRefusal { kGoOn, kFail };

struct PhasePlan {
  std::map<RoleKind, TagSet> release;  // by role kind
  std::map<RoleKind, TagSet> resume;
  double timeout_s = 0;                // per command; 0: the group's default
};

struct Choreography {
  std::map<PhaseKind, PhasePlan> phases;  // kRollout, kTeacher, kTrain, kSync
  double timeout_s = 120;                 // default per-command timeout
  OnFault on_fault = OnFault::kFail;
  OnRefusal on_refusal = OnRefusal::kGoOn;
};
Choreography DefaultChoreography();

// One role of the group and where its ranks live.
struct GroupRole {
  std::string name;                    // role name in the job spec
  RoleKind kind = RoleKind::kActor;
  std::vector<std::vector<int>> gpus;  // per rank: its logical GPU ids
};

struct GroupConfig {
  std::vector<GroupRole> roles;       // teachers are indexed in this order
  std::map<int, uint64_t> capacity;   // bytes per GPU (a GPU absent: not checked)
  Choreography choreography = DefaultChoreography();

  const GroupRole* FindRole(std::string_view name) const;
  // The name of teacher `index` (0-based), or "" when there is none.
  std::string TeacherName(int index) const;
  int TeacherCount() const;
};

}  // namespace tandem::handoff
