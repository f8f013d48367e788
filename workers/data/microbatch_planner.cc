// The micro-batch planner: items -> units (split at forks) -> the chosen
// search -> equal micro-batch counts per rank (microbatch_planner.h).
#include "workers/data/microbatch_planner.h"

#include <algorithm>
#include <optional>
#include <string>

#include "workers/data/microbatch_search.h"

namespace tandem::data {
namespace {

Status ValidateOptions(const MicroBatchOptions& o) {
  if (o.token_cap < 1) return InvalidArgument("micro-batch plan: token_cap " + std::to_string(o.token_cap) + " < 1");
  if (o.ranks < 1) return InvalidArgument("micro-batch plan: ranks " + std::to_string(o.ranks) + " < 1");
  if (o.cost.alignment < 1)
    return InvalidArgument("micro-batch plan: alignment " + std::to_string(o.cost.alignment) + " < 1");
  if (o.exact_max_units < 0)
    return InvalidArgument("micro-batch plan: exact_max_units " + std::to_string(o.exact_max_units) + " < 0");
  if (o.exact_node_budget < 0)
    return InvalidArgument("micro-batch plan: exact_node_budget " + std::to_string(o.exact_node_budget) + " < 0");
  return Status::Ok();
}

// Gives every rank `m` micro-batches: while a rank has fewer, its bin with
// the most units (then the largest cost, then the lowest index) gives its
// smallest unit (the later one on ties) to a new bin; with no bin of two
// units left, an empty bin. Loads per rank are unchanged and no bin grows.
void EqualizeCounts(BinAssignment& plan, const std::vector<int64_t>& costs, int32_t m) {
  auto bin_cost = [&](const std::vector<int32_t>& bin) {
    int64_t s = 0;
    for (int32_t u : bin) s += costs[u];
    return s;
  };
  for (auto& rank : plan) {
    while (static_cast<int32_t>(rank.size()) < m) {
      int32_t pick = -1;
      for (size_t b = 0; b < rank.size(); ++b) {
        if (rank[b].size() < 2) continue;
        if (pick < 0 || rank[b].size() > rank[pick].size() ||
            (rank[b].size() == rank[pick].size() && bin_cost(rank[b]) > bin_cost(rank[pick])))
          pick = static_cast<int32_t>(b);
      }
      if (pick < 0) {
        rank.emplace_back();
        continue;
      }
      std::vector<int32_t>& from = rank[pick];
      size_t smallest = 0;
      for (size_t i = 1; i < from.size(); ++i)
        if (costs[from[i]] <= costs[from[smallest]]) smallest = i;
      const int32_t u = from[smallest];
      from.erase(from.begin() + static_cast<std::ptrdiff_t>(smallest));
      rank.push_back({u});
    }
  }
}

}  // namespace

std::string_view PlanAlgorithmName(PlanAlgorithm algorithm) {
  switch (algorithm) {
    case PlanAlgorithm::kAuto: return "auto";
    case PlanAlgorithm::kExact: return "exact";
    case PlanAlgorithm::kFirstFitDecreasing: return "ffd";
    case PlanAlgorithm::kKarmarkarKarp: return "karmarkar_karp";
  }
  return "unknown";
}

std::string MicroBatchPlan::Summary() const {
  int64_t max_rank_cost = 0;
  for (const RankPlan& r : ranks) max_rank_cost = std::max(max_rank_cost, r.cost);
  return "algorithm=" + std::string(PlanAlgorithmName(algorithm)) +
         " proven_optimal=" + (proven_optimal ? "true" : "false") + " ranks=" + std::to_string(ranks.size()) +
         " micro_batches=" + std::to_string(micro_batches_per_rank) + " units=" + std::to_string(units) +
         " split_items=" + std::to_string(split_items) + " total_cost=" + std::to_string(total_cost) +
         " max_rank_cost=" + std::to_string(max_rank_cost) + " lower_bound_cost=" + std::to_string(lower_bound_cost) +
         " search_nodes=" + std::to_string(search_nodes);
}

StatusOr<MicroBatchPlan> PlanMicroBatches(const std::vector<PlanItem>& items, const MicroBatchOptions& options) {
  TANDEM_RETURN_IF_ERROR(ValidateOptions(options));
  std::vector<ItemPart> units;
  MicroBatchPlan out;
  for (size_t i = 0; i < items.size(); ++i) {
    TANDEM_RETURN_IF_ERROR(ValidatePlanItem(items[i], i), "micro-batch plan");
    TANDEM_ASSIGN_OR_RETURN(std::vector<ItemPart> parts,
                            SplitItem(items[i], static_cast<int32_t>(i), options.cost, options.token_cap),
                            "micro-batch plan");
    if (parts.size() > 1) ++out.split_items;
    units.insert(units.end(), parts.begin(), parts.end());
  }
  std::vector<int64_t> costs;
  for (const ItemPart& p : units) costs.push_back(p.cost);
  const int64_t cap = options.token_cap;
  const int32_t ranks = options.ranks;
  const int32_t n = static_cast<int32_t>(units.size());
  const PlanScore lower = LowerBound(costs, cap, ranks);

  // The heuristics, then the exact search from the better of them.
  BinAssignment plan = FirstFitDecreasing(costs, cap, ranks);
  PlanAlgorithm used = PlanAlgorithm::kFirstFitDecreasing;
  if (options.algorithm != PlanAlgorithm::kFirstFitDecreasing) {
    const bool forced = options.algorithm == PlanAlgorithm::kKarmarkarKarp;
    // Forced, up to one unit per bin (always feasible); otherwise only plans
    // with no more micro-batches than FFD's can win.
    const int32_t limit = forced ? std::max<int32_t>(1, (n + ranks - 1) / ranks) : Score(plan, costs).micro_batches;
    std::optional<BinAssignment> kk = KarmarkarKarp(costs, cap, ranks, limit);
    if (kk && (forced || Score(*kk, costs) < Score(plan, costs))) {
      plan = std::move(*kk);
      used = PlanAlgorithm::kKarmarkarKarp;
    }
  }
  out.proven_optimal = Score(plan, costs) <= lower;
  if (options.algorithm == PlanAlgorithm::kExact ||
      (options.algorithm == PlanAlgorithm::kAuto && n <= options.exact_max_units)) {
    ExactResult exact = ExactSearch(costs, cap, ranks, plan, options.exact_node_budget);
    plan = std::move(exact.plan);
    used = PlanAlgorithm::kExact;
    out.proven_optimal = exact.proven_optimal;
    out.search_nodes = exact.nodes;
  }

  const int32_t m = Score(plan, costs).micro_batches;
  EqualizeCounts(plan, costs, m);
  out.algorithm = used;
  out.micro_batches_per_rank = m;
  out.units = n;
  out.lower_bound_cost = lower.max_rank_cost;
  for (auto& rank : plan) {
    RankPlan rp;
    for (auto& bin : rank) {
      MicroBatch mb;
      for (int32_t u : bin) {
        mb.parts.push_back(units[u]);
        mb.tokens += units[u].tokens;
        mb.cost += units[u].cost;
      }
      std::sort(mb.parts.begin(), mb.parts.end(), [](const ItemPart& a, const ItemPart& b) {
        return a.item != b.item ? a.item < b.item : a.begin < b.begin;
      });
      rp.cost += mb.cost;
      rp.tokens += mb.tokens;
      rp.micro_batches.push_back(std::move(mb));
    }
    std::stable_sort(rp.micro_batches.begin(), rp.micro_batches.end(), [](const MicroBatch& a, const MicroBatch& b) {
      if (a.cost != b.cost) return a.cost > b.cost;
      if (a.parts.empty() || b.parts.empty()) return !a.parts.empty() && b.parts.empty();
      return a.parts[0].item != b.parts[0].item ? a.parts[0].item < b.parts[0].item
                                                : a.parts[0].begin < b.parts[0].begin;
    });
    out.total_cost += rp.cost;
    out.ranks.push_back(std::move(rp));
  }
  return out;
}

}  // namespace tandem::data
