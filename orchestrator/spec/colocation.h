// Colocation groups of a job (docs/jobspec.md "Colocation and
// placement").
//
// A role without colocate_with owns a group; a role that colocates with
// another (directly or through a chain) joins the group of the chain's
// owner. The owner's replicas x gpus_per_replica is the group's size; every
// other member must fit in it (replicas x gpus_per_replica <= size), and a
// role with GPUs cannot join the group of a CPU-only owner. Used by the spec
// parser (for its errors) and by placement (for the groups).
#pragma once

#include <cstdint>
#include <vector>

#include "orchestrator/spec/job_spec.h"

namespace tandem::spec {

struct ColocationGroup {
  int owner = 0;             // index into the roles
  std::vector<int> members;  // role indices: the owner first, then spec order
  int64_t devices = 0;       // the owner's replicas x gpus_per_replica
};

struct Colocation {
  std::vector<ColocationGroup> groups;  // in spec order of their owners
  std::vector<int> group_of;            // per role: its group, or -1 if unresolved
  int64_t devices_needed = 0;           // sum of the groups' sizes
};

// Resolves the groups of `roles` and appends one error per violation, with
// its path (roles.<name>.colocate_with or roles.<name>): a duplicate role
// name, colocate_with naming itself or a role that does not exist, a cycle
// (reported once, at its first role in spec order, e.g. "colocation cycle
// a -> b -> a"), a member larger than its group, a GPU role in a CPU-only
// group. The result is complete iff no error was appended.
Colocation ResolveColocation(const std::vector<RoleSpec>& roles, std::vector<SpecError>* errors);

}  // namespace tandem::spec
