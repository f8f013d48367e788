// Spreading a job's tasks over the nodes of a multi-node batch job (issue #5
// item 3; docs/slurm.md "Submit mode", "Multi-node"; docs/jobspec.md
// "Colocation and placement").
//
// A job's devices are logical, 0..N-1. Over an allocation of K nodes with G
// GPUs each, node k holds logical devices [k*G, (k+1)*G) in the order of the
// allocation's node list: the fill-a-node-first order of PlaceOnNodes
// (hostlist.h), so replicas of gpus_per_replica dividing G land exactly where
// PlaceOnNodes puts them, colocated roles (identical logical devices) land on
// the same node, and a node's GPUs are never shared by two replicas. A task
// becomes a step on its node (`srun -w node`) with CUDA_VISIBLE_DEVICES the
// node-local GPU ids. CPU-only tasks go to the first node.
#pragma once

#include <string>
#include <vector>

#include "backends/slurm/allocation.h"
#include "common/status.h"

namespace tandem::backends::slurm {

struct StepPlacement {
  std::string node;       // "" when the allocation has no node list
  std::vector<int> gpus;  // the node's GPU ids for the task's devices (CUDA_VISIBLE_DEVICES)
};

// InvalidArgument when a logical device is outside the allocation or the
// task's devices span two nodes (a replica is never split).
StatusOr<StepPlacement> PlaceStep(const Allocation& alloc, const std::vector<int>& logical);

}  // namespace tandem::backends::slurm
