// The micro-batch planner's search over unit costs: First-Fit-Decreasing,
// Karmarkar–Karp (multi-way largest differencing) and branch and bound
// (microbatch_search.h).
#include "workers/data/microbatch_search.h"

#include <algorithm>
#include <numeric>
#include <queue>
#include <tuple>

namespace tandem::data {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t SumOf(const std::vector<int32_t>& units, const std::vector<int64_t>& costs) {
  int64_t s = 0;
  for (int32_t u : units) s += costs[u];
  return s;
}

// Unit indices by cost, largest first, lower index first on ties.
std::vector<int32_t> Decreasing(const std::vector<int64_t>& costs) {
  std::vector<int32_t> order(costs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return costs[a] > costs[b]; });
  return order;
}

// Deals bins to `ranks` ranks, at most `per_rank` each (ranks * per_rank >=
// bins.size()): largest bin first, to the least-loaded rank with room.
BinAssignment DealBins(std::vector<std::vector<int32_t>> bins, const std::vector<int64_t>& costs, int32_t ranks,
                       int32_t per_rank) {
  std::vector<int64_t> load(bins.size());
  for (size_t b = 0; b < bins.size(); ++b) load[b] = SumOf(bins[b], costs);
  std::vector<int32_t> order = Decreasing(load);
  BinAssignment plan(ranks);
  std::vector<int64_t> rank_load(ranks, 0);
  for (int32_t b : order) {
    int32_t pick = -1;
    for (int32_t r = 0; r < ranks; ++r)
      if (static_cast<int32_t>(plan[r].size()) < per_rank && (pick < 0 || rank_load[r] < rank_load[pick])) pick = r;
    plan[pick].push_back(std::move(bins[b]));
    rank_load[pick] += load[b];
  }
  return plan;
}

void DropEmptyBins(BinAssignment& plan) {
  for (auto& rank : plan)
    rank.erase(std::remove_if(rank.begin(), rank.end(), [](const auto& bin) { return bin.empty(); }), rank.end());
}

bool BinsFit(const std::vector<std::vector<int32_t>>& bins, const std::vector<int64_t>& costs, int64_t cap) {
  for (const auto& bin : bins)
    if (SumOf(bin, costs) > cap) return false;
  return true;
}

}  // namespace

PlanScore Score(const BinAssignment& plan, const std::vector<int64_t>& costs) {
  PlanScore s;
  for (const auto& rank : plan) {
    s.micro_batches = std::max(s.micro_batches, static_cast<int32_t>(rank.size()));
    int64_t load = 0;
    for (const auto& bin : rank) load += SumOf(bin, costs);
    s.max_rank_cost = std::max(s.max_rank_cost, load);
  }
  return s;
}

PlanScore LowerBound(const std::vector<int64_t>& costs, int64_t cap, int32_t ranks) {
  int64_t sum = 0, largest = 0, over_half = 0;
  for (int64_t c : costs) {
    sum += c;
    largest = std::max(largest, c);
    if (2 * c > cap) ++over_half;
  }
  const int64_t bins = std::max(CeilDiv(sum, cap), over_half);
  return {static_cast<int32_t>(CeilDiv(bins, ranks)), std::max(CeilDiv(sum, ranks), largest)};
}

BinAssignment FirstFitDecreasing(const std::vector<int64_t>& costs, int64_t cap, int32_t ranks) {
  std::vector<std::vector<int32_t>> bins;
  std::vector<int64_t> load;
  for (int32_t u : Decreasing(costs)) {
    size_t b = 0;
    while (b < bins.size() && load[b] + costs[u] > cap) ++b;
    if (b == bins.size()) {
      bins.emplace_back();
      load.push_back(0);
    }
    bins[b].push_back(u);
    load[b] += costs[u];
  }
  const int32_t per_rank = static_cast<int32_t>(CeilDiv(static_cast<int64_t>(bins.size()), ranks));
  return DealBins(std::move(bins), costs, ranks, per_rank);
}

std::vector<std::vector<int32_t>> LargestDifferencing(const std::vector<int64_t>& costs, int32_t k) {
  const int32_t n = static_cast<int32_t>(costs.size());
  std::vector<std::vector<int32_t>> out(k);
  if (n == 0) return out;
  // A partial partition: its non-empty subsets by sum, largest first (the
  // other k - size are empty, sum 0); the units of a subset are a linked list
  // through `next` (head, tail). Sparse, so that early merges of few units
  // cost little when k is large.
  struct Subset { int64_t sum; int32_t head; int32_t tail; };
  std::vector<int32_t> next(n, -1);
  std::vector<std::vector<Subset>> nodes(n);
  for (int32_t i = 0; i < n; ++i) nodes[i] = {Subset{costs[i], i, i}};
  auto difference = [k](const std::vector<Subset>& x) {
    return x.front().sum - (static_cast<int32_t>(x.size()) < k ? 0 : x.back().sum);
  };
  // Largest difference (max - min) first; then the lower id.
  using Entry = std::tuple<int64_t, int32_t>;  // (difference, -id)
  std::priority_queue<Entry> queue;
  for (int32_t i = 0; i < n; ++i) queue.push({difference(nodes[i]), -i});
  std::vector<Subset> merged;
  while (queue.size() > 1) {
    const int32_t a = -std::get<1>(queue.top());
    queue.pop();
    const int32_t b = -std::get<1>(queue.top());
    queue.pop();
    const std::vector<Subset>& x = nodes[a];
    const std::vector<Subset>& y = nodes[b];
    // Largest with smallest: position i of x (dense, k long) takes position
    // k-1-i of y; y's non-empty subsets sit at [0, |y|), i.e. i >= k - |y|.
    const int32_t nx = static_cast<int32_t>(x.size()), ny = static_cast<int32_t>(y.size());
    merged.clear();
    for (int32_t i = 0; i < k; ++i) {
      const bool has_x = i < nx, has_y = i >= k - ny;
      if (!has_x && !has_y) {
        i = k - ny - 1;  // skip the empty middle
        continue;
      }
      Subset s = has_x ? x[i] : Subset{0, -1, -1};
      if (has_y) {
        const Subset& t = y[k - 1 - i];
        if (s.head < 0) {
          s.head = t.head;
        } else {
          next[s.tail] = t.head;
        }
        s.tail = t.tail;
        s.sum += t.sum;
      }
      merged.push_back(s);
    }
    std::stable_sort(merged.begin(), merged.end(), [](const Subset& p, const Subset& q) { return p.sum > q.sum; });
    nodes[a].swap(merged);
    std::vector<Subset>().swap(nodes[b]);
    queue.push({difference(nodes[a]), -a});
  }
  const std::vector<Subset>& last = nodes[-std::get<1>(queue.top())];
  for (size_t i = 0; i < last.size(); ++i)
    for (int32_t u = last[i].head; u >= 0; u = next[u]) out[i].push_back(u);
  for (auto& subset : out) std::sort(subset.begin(), subset.end());
  return out;
}

std::optional<BinAssignment> KarmarkarKarp(const std::vector<int64_t>& costs, int64_t cap, int32_t ranks,
                                           int32_t max_micro_batches) {
  const int32_t first = std::max(LowerBound(costs, cap, ranks).micro_batches, 1);
  const std::vector<std::vector<int32_t>> by_rank = LargestDifferencing(costs, ranks);
  for (int32_t m = first; m <= max_micro_batches; ++m) {
    std::optional<BinAssignment> best;
    // (a) Balanced ranks first, then each rank's units into m bins.
    BinAssignment a(ranks);
    bool a_fits = true;
    for (int32_t r = 0; r < ranks && a_fits; ++r) {
      const std::vector<int32_t>& units = by_rank[r];
      std::vector<int64_t> sub(units.size());
      for (size_t i = 0; i < units.size(); ++i) sub[i] = costs[units[i]];
      std::vector<std::vector<int32_t>> bins = LargestDifferencing(sub, m);
      if (!BinsFit(bins, sub, cap)) bins = FirstFitDecreasing(sub, cap, 1)[0];
      if (static_cast<int32_t>(bins.size()) > m) a_fits = false;
      for (auto& bin : bins)
        for (int32_t& u : bin) u = units[u];
      a[r] = std::move(bins);
    }
    if (a_fits) {
      DropEmptyBins(a);
      best = std::move(a);
    }
    // (b) Equal bins first (ranks x m of them), then m to each rank.
    std::vector<std::vector<int32_t>> bins = LargestDifferencing(costs, ranks * m);
    if (BinsFit(bins, costs, cap)) {
      BinAssignment b = DealBins(std::move(bins), costs, ranks, m);
      DropEmptyBins(b);
      if (!best || Score(b, costs) < Score(*best, costs)) best = std::move(b);
    }
    if (best) return best;
  }
  return std::nullopt;
}

namespace {

class BranchAndBound {
 public:
  BranchAndBound(const std::vector<int64_t>& costs, int64_t cap, int32_t ranks, const BinAssignment& incumbent,
                 int64_t budget)
      : costs_(costs), cap_(cap), ranks_(ranks), budget_(budget), order_(Decreasing(costs)),
        lower_(LowerBound(costs, cap, ranks)), best_(Score(incumbent, costs)), best_plan_(incumbent),
        bins_(ranks), rank_load_(ranks, 0), where_(costs.size()), rank_order_(costs.size() * ranks) {}

  ExactResult Run() {
    done_ = best_ <= lower_;
    if (!done_) Search(0, 0, 0);
    return {std::move(best_plan_), done_ || !out_of_budget_, nodes_};
  }

 private:
  struct Place { int32_t rank; int32_t bin; };

  bool Promising(int32_t m, int64_t load) const {
    return PlanScore{std::max(m, lower_.micro_batches), std::max(load, lower_.max_rank_cost)} < best_;
  }

  void Search(size_t k, int32_t m, int64_t load) {
    if (done_ || out_of_budget_) return;
    if (++nodes_ > budget_) {
      out_of_budget_ = true;
      return;
    }
    if (k == order_.size()) {
      Record(m, load);
      return;
    }
    const int32_t u = order_[k];
    const int64_t c = costs_[u];
    // Ranks least loaded first (lower index on ties); only the first empty rank.
    int32_t* ranks = &rank_order_[k * ranks_];
    std::iota(ranks, ranks + ranks_, 0);
    std::stable_sort(ranks, ranks + ranks_, [&](int32_t a, int32_t b) { return rank_load_[a] < rank_load_[b]; });
    bool empty_tried = false;
    for (int32_t i = 0; i < ranks_; ++i) {
      const int32_t r = ranks[i];
      std::vector<int64_t>& bins = bins_[r];
      if (bins.empty()) {
        if (empty_tried) continue;
        empty_tried = true;
      }
      const int64_t new_load = std::max(load, rank_load_[r] + c);
      for (size_t b = 0; b < bins.size(); ++b) {
        if (bins[b] + c > cap_ || std::find(bins.begin(), bins.begin() + b, bins[b]) != bins.begin() + b) continue;
        if (!Promising(m, new_load)) break;
        Apply(u, r, static_cast<int32_t>(b), c);
        Search(k + 1, m, new_load);
        Undo(u, r, c);
      }
      const int32_t new_m = std::max(m, static_cast<int32_t>(bins.size()) + 1);
      if (Promising(new_m, new_load)) {
        bins.push_back(0);
        Apply(u, r, static_cast<int32_t>(bins.size()) - 1, c);
        Search(k + 1, new_m, new_load);
        Undo(u, r, c);
        bins.pop_back();
      }
    }
  }

  void Apply(int32_t u, int32_t r, int32_t b, int64_t c) {
    bins_[r][b] += c;
    rank_load_[r] += c;
    where_[u] = {r, b};
  }
  void Undo(int32_t u, int32_t r, int64_t c) {
    bins_[r][where_[u].bin] -= c;
    rank_load_[r] -= c;
  }

  void Record(int32_t m, int64_t load) {
    const PlanScore score{m, load};
    if (!(score < best_)) return;
    best_ = score;
    best_plan_.assign(ranks_, {});
    for (int32_t r = 0; r < ranks_; ++r) best_plan_[r].resize(bins_[r].size());
    for (int32_t u : order_) best_plan_[where_[u].rank][where_[u].bin].push_back(u);
    for (auto& rank : best_plan_)
      for (auto& bin : rank) std::sort(bin.begin(), bin.end());
    if (best_ <= lower_) done_ = true;
  }

  const std::vector<int64_t>& costs_;
  const int64_t cap_;
  const int32_t ranks_;
  const int64_t budget_;
  const std::vector<int32_t> order_;
  const PlanScore lower_;
  PlanScore best_;
  BinAssignment best_plan_;
  std::vector<std::vector<int64_t>> bins_;  // per rank, load per bin
  std::vector<int64_t> rank_load_;
  std::vector<Place> where_;                // per unit
  std::vector<int32_t> rank_order_;         // per depth, the ranks in the order tried
  int64_t nodes_ = 0;
  bool done_ = false;
  bool out_of_budget_ = false;
};

}  // namespace

ExactResult ExactSearch(const std::vector<int64_t>& costs, int64_t cap, int32_t ranks,
                        const BinAssignment& incumbent, int64_t node_budget) {
  return BranchAndBound(costs, cap, ranks, incumbent, node_budget).Run();
}

}  // namespace tandem::data
