// The micro-batch planner's search over unit costs (docs/rl.md "Micro-batch
// planning"): place units of known cost (each <= the cap) into micro-batches
// ("bins") of at most `cap` on each of `ranks` data-parallel ranks.
//
// Objective, lexicographic (PlanScore):
//   1. the micro-batch count M = the most micro-batches any rank has (every
//      rank then runs M; the planner pads the others);
//   2. the max per-rank load (sum of its units' costs): the slowest rank.
// Every algorithm here returns a feasible assignment (every unit placed once,
// no bin over the cap); they differ in how close they get. All are
// deterministic: ties go to the lower index.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace tandem::data {

// ranks[r][b] = the unit indices in micro-batch b of rank r.
using BinAssignment = std::vector<std::vector<std::vector<int32_t>>>;

struct PlanScore {
  int32_t micro_batches = 0;   // max over ranks
  int64_t max_rank_cost = 0;
  auto operator<=>(const PlanScore&) const = default;
};
PlanScore Score(const BinAssignment& plan, const std::vector<int64_t>& costs);

// Lower bounds on the objective for any feasible plan: bins >= max(ceil(sum /
// cap), #units over cap/2), spread over the ranks; the max load >=
// max(ceil(sum / ranks), the largest unit).
PlanScore LowerBound(const std::vector<int64_t>& costs, int64_t cap, int32_t ranks);

// First-Fit-Decreasing into one pool of bins (M = ceil(bins / ranks)), then
// bins to ranks largest first, each to the least-loaded rank that has fewer
// than M bins.
BinAssignment FirstFitDecreasing(const std::vector<int64_t>& costs, int64_t cap, int32_t ranks);

// Multi-way largest differencing (Karmarkar–Karp): `k` subsets whose sums are
// close, as index lists (some may be empty when there are fewer units than k).
std::vector<std::vector<int32_t>> LargestDifferencing(const std::vector<int64_t>& costs, int32_t k);

// Karmarkar–Karp plans for M from the lower bound up to `max_micro_batches`:
// for each M, (a) differencing into the ranks, then each rank's units into M
// bins (differencing, FFD when that overflows), and (b) differencing into
// ranks x M bins, dealt to the ranks M each; the better feasible plan of the
// first M where either is feasible. nullopt when none is up to the limit.
std::optional<BinAssignment> KarmarkarKarp(const std::vector<int64_t>& costs, int64_t cap, int32_t ranks,
                                           int32_t max_micro_batches);

// Branch and bound over every placement (units largest first; symmetric
// choices — empty ranks, bins of equal load in a rank — tried once), started
// from `incumbent` (a feasible plan: the result is never worse). Stops after
// `node_budget` nodes; proven_optimal says whether the search finished (or
// met the lower bound).
struct ExactResult {
  BinAssignment plan;
  bool proven_optimal = false;
  int64_t nodes = 0;
};
ExactResult ExactSearch(const std::vector<int64_t>& costs, int64_t cap, int32_t ranks,
                        const BinAssignment& incumbent, int64_t node_budget);

}  // namespace tandem::data
