// The micro-batch planner (docs/rl.md "Micro-batch planning"; issue #16
// item 3): a train step's items (plain sequences or groups' tries;
// microbatch_cost.h) -> per data-parallel rank, the micro-batches to run.
//
// Guarantees of every plan:
//   - every sequence of every item is placed exactly once; an item stays
//     whole when it fits the cap, otherwise it is cut at forks into the fewest
//     sub-tries that each fit (a part is a contiguous run of the item's
//     sequences); a sequence that does not fit alone is an error naming it;
//   - no micro-batch costs more than the cap (costs include padding);
//   - every rank has the same number of micro-batches, M. A rank whose units
//     need fewer bins gets more by moving units out of its fullest
//     micro-batches (which lowers no bin over the cap); only a rank with fewer
//     than M units gets empty micro-batches, at its end (the trainer runs them
//     as zero-token steps so that collectives per micro-batch stay in step);
//   - objective: the fewest M, then the smallest max per-rank cost;
//   - deterministic: the same input gives the same plan.
// Algorithms: for at most `exact_max_units` units, branch and bound started
// from the best heuristic plan (never worse than the heuristics); otherwise
// the better of First-Fit-Decreasing and Karmarkar–Karp. The plan says which.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "workers/data/microbatch_cost.h"

namespace tandem::data {

enum class PlanAlgorithm {
  kAuto,                // exact when small, else the better heuristic
  kExact,               // branch and bound (from the better heuristic)
  kFirstFitDecreasing,
  kKarmarkarKarp,
};
std::string_view PlanAlgorithmName(PlanAlgorithm algorithm);  // "auto", "exact", "ffd", "karmarkar_karp"

struct MicroBatchOptions {
  int64_t token_cap = 0;         // > 0: the most a micro-batch may cost
  int32_t ranks = 1;             // data-parallel ranks, >= 1
  CostModel cost;                // alignment, packing
  PlanAlgorithm algorithm = PlanAlgorithm::kAuto;
  int32_t exact_max_units = 12;  // kAuto runs the exact search up to this many units
  int64_t exact_node_budget = 200000;
};

struct MicroBatch {
  std::vector<ItemPart> parts;  // by item, then first sequence
  int64_t tokens = 0;           // sum of the parts' tokens
  int64_t cost = 0;             // sum of the parts' costs, <= token_cap
};

struct RankPlan {
  std::vector<MicroBatch> micro_batches;  // largest cost first, empty ones last
  int64_t cost = 0;
  int64_t tokens = 0;
};

struct MicroBatchPlan {
  std::vector<RankPlan> ranks;
  int32_t micro_batches_per_rank = 0;
  PlanAlgorithm algorithm = PlanAlgorithm::kAuto;  // the one whose plan this is (never kAuto)
  bool proven_optimal = false;  // exact search finished, or the plan meets the lower bound
  int64_t search_nodes = 0;     // branch-and-bound nodes visited (0 without)
  int32_t units = 0;            // items and parts placed
  int32_t split_items = 0;      // items cut at forks
  int64_t total_cost = 0;
  int64_t lower_bound_cost = 0; // no plan's max rank cost is below this

  // One log line's fields: "algorithm=ffd ranks=2 micro_batches=3 ...".
  std::string Summary() const;
};

// InvalidArgument on bad options, a bad item (ValidatePlanItem), or a
// sequence that does not fit the cap alone (SplitItem), naming it.
StatusOr<MicroBatchPlan> PlanMicroBatches(const std::vector<PlanItem>& items, const MicroBatchOptions& options);

}  // namespace tandem::data
