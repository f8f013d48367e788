// Placement: which devices each task gets (docs/jobspec.md "Colocation
// and placement").
//
// Roles form colocation groups: a role without colocate_with is a group's
// owner; roles that colocate with it (directly or through a chain) share its
// devices. Groups take consecutive, disjoint ranges of the job's logical
// devices in spec order. Inside a group, each role's replicas take
// contiguous, non-overlapping slices of gpus_per_replica devices starting at
// the group's first device, so colocated roles see identical device sets.
// Logical ids are mapped to physical ids only at launch.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "orchestrator/spec/job_spec.h"

namespace tandem::placement {

struct TaskPlacement {
  std::string role;
  int rank = 0;                   // replica index within the role
  int world_size = 1;             // the role's replicas
  int group = 0;                  // colocation group index
  std::vector<int> logical;       // logical device ids (the job's namespace)
  std::vector<int> physical;      // physical ids (CUDA_VISIBLE_DEVICES)
};

struct JobPlacement {
  std::vector<TaskPlacement> tasks;           // roles in spec order, ranks ascending
  std::vector<std::vector<std::string>> groups;  // role names per group, owner first
  std::vector<std::vector<int>> group_devices;   // logical ids per group
};

// Places every task, mapping logical ids through `inv` (logical id i ->
// inv.gpus[i]). Fails with the reason when the job does not fit.
StatusOr<JobPlacement> PlaceJob(const spec::JobSpec& spec, const spec::Inventory& inv);

}  // namespace tandem::placement
