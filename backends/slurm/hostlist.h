// Slurm hostlist expressions and multi-node placement (issue #5 item 6;
// docs/jobspec.md "Colocation and placement").
//
// Slurm names node sets compactly: "gpu[01-04,07]", "a1,b[2-3]",
// "rack[1-2]-n[01-02]" (several bracket groups multiply out, left to right).
// Zero padding of a range's lower bound is kept ("gpu[08-10]" gives gpu08,
// gpu09, gpu10). ExpandHostlist is what SLURM_JOB_NODELIST and `scontrol show
// hostnames` mean; PlaceOnNodes maps a role's replicas onto them so the
// placement logic can be tested with many nodes on a one-node test cluster.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tandem::backends::slurm {

// "gpu[01-04,07]" -> {gpu01, gpu02, gpu03, gpu04, gpu07}. Errors name the
// offending part (unbalanced bracket, empty range, reversed range, non-number).
StatusOr<std::vector<std::string>> ExpandHostlist(std::string_view expr);

// GPU ids in Slurm's index notation: "0-2,5" or "IDX:0-2,5" -> {0,1,2,5}.
StatusOr<std::vector<int>> ParseIndexList(std::string_view s);

// One replica of a role placed on a node.
struct NodeSlot {
  std::string node;
  std::vector<int> gpus;  // node-local GPU indices, a contiguous slice
};

// Places `replicas` replicas of `gpus_per_replica` GPUs each on `nodes`, each
// with `gpus_per_node` GPUs: fills a node before moving to the next, never
// splits a replica across nodes, slices are disjoint. gpus_per_replica 0
// gives CPU-only slots, round-robin over nodes. Errors when they do not fit.
StatusOr<std::vector<NodeSlot>> PlaceOnNodes(const std::vector<std::string>& nodes,
                                             int gpus_per_node, int replicas,
                                             int gpus_per_replica);

}  // namespace tandem::backends::slurm
