// The micro-batch cost model: item validation, compact token counts, splitting
// a trie at forks (microbatch_cost.h).
#include "workers/data/microbatch_cost.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <string>

namespace tandem::data {

PlanItem PlanItem::Sequence(int32_t length) { return PlanItem{{length}, {0}}; }

StatusOr<TrieItem> TrieItemFromTokens(const std::vector<std::vector<int32_t>>& sequences) {
  if (sequences.empty()) return InvalidArgument("trie item: no sequences");
  TrieItem t;
  t.order.resize(sequences.size());
  std::iota(t.order.begin(), t.order.end(), 0);
  for (size_t s = 0; s < sequences.size(); ++s) {
    if (sequences[s].empty()) return InvalidArgument("trie item: sequence " + std::to_string(s) + " is empty");
    if (sequences[s].size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
      return InvalidArgument("trie item: sequence " + std::to_string(s) + " is too long");
  }
  // Lexicographic order is a DFS order of the trie; stable, so equal
  // sequences keep their input order.
  std::stable_sort(t.order.begin(), t.order.end(),
                   [&](int32_t a, int32_t b) { return sequences[a] < sequences[b]; });
  for (size_t k = 0; k < t.order.size(); ++k) {
    const std::vector<int32_t>& cur = sequences[t.order[k]];
    t.item.lengths.push_back(static_cast<int32_t>(cur.size()));
    int32_t shared = 0;
    if (k > 0) {
      const std::vector<int32_t>& prev = sequences[t.order[k - 1]];
      const size_t n = std::min(prev.size(), cur.size());
      while (static_cast<size_t>(shared) < n && prev[shared] == cur[shared]) ++shared;
    }
    t.item.shared_prefix.push_back(shared);
  }
  return t;
}

Status ValidatePlanItem(const PlanItem& item, size_t index) {
  const std::string where = "item " + std::to_string(index);
  if (item.lengths.empty()) return InvalidArgument(where + ": no sequences");
  if (item.shared_prefix.size() != item.lengths.size())
    return InvalidArgument(where + ": " + std::to_string(item.lengths.size()) + " lengths but " +
                           std::to_string(item.shared_prefix.size()) + " shared prefixes");
  for (size_t i = 0; i < item.lengths.size(); ++i) {
    const std::string seq = where + " sequence " + std::to_string(i);
    if (item.lengths[i] < 1) return InvalidArgument(seq + ": length " + std::to_string(item.lengths[i]) + " < 1");
    const int32_t shared = item.shared_prefix[i];
    if (i == 0 && shared != 0)
      return InvalidArgument(seq + ": shared prefix " + std::to_string(shared) + ", expected 0 for the first");
    if (i > 0 && (shared < 0 || shared > std::min(item.lengths[i - 1], item.lengths[i])))
      return InvalidArgument(seq + ": shared prefix " + std::to_string(shared) + " outside [0, " +
                             std::to_string(std::min(item.lengths[i - 1], item.lengths[i])) + "]");
  }
  return Status::Ok();
}

int64_t CompactTokens(const PlanItem& item, const std::vector<int32_t>& positions) {
  int64_t tokens = 0;
  for (size_t k = 0; k < positions.size(); ++k) {
    tokens += item.lengths[positions[k]];
    if (k == 0) continue;
    int32_t common = std::numeric_limits<int32_t>::max();
    for (int32_t i = positions[k - 1] + 1; i <= positions[k]; ++i) common = std::min(common, item.shared_prefix[i]);
    tokens -= common;
  }
  return tokens;
}

int64_t CostModel::Tokens(const PlanItem& item, int32_t begin, int32_t end) const {
  int64_t tokens = 0;
  for (int32_t i = begin; i < end; ++i) {
    tokens += item.lengths[i];
    if (packing && i > begin) tokens -= item.shared_prefix[i];
  }
  return tokens;
}

int64_t CostModel::Cost(const PlanItem& item, int32_t begin, int32_t end) const {
  if (packing) return RoundUp(Tokens(item, begin, end), alignment);
  int64_t cost = 0;
  for (int32_t i = begin; i < end; ++i) cost += RoundUp(item.lengths[i], alignment);
  return cost;
}

StatusOr<std::vector<ItemPart>> SplitItem(const PlanItem& item, int32_t index, const CostModel& model,
                                          int64_t cap) {
  const int32_t n = item.num_sequences();
  for (int32_t i = 0; i < n; ++i) {
    const int64_t alone = model.Cost(item, i, i + 1);
    if (alone > cap)
      return InvalidArgument("item " + std::to_string(index) + " sequence " + std::to_string(i) + ": " +
                             std::to_string(item.lengths[i]) + " tokens (" + std::to_string(alone) +
                             " with alignment " + std::to_string(model.alignment) +
                             ") do not fit the micro-batch cap of " + std::to_string(cap) +
                             " tokens even alone");
  }
  const int64_t whole = model.Cost(item, 0, n);
  if (whole <= cap) return std::vector<ItemPart>{{index, 0, n, model.Tokens(item, 0, n), whole}};

  // best[j]: fewest runs covering [0, j), then least cost; from[j]: start of
  // the last run. Run cost only grows as the run extends to the left
  // (len[i] >= shared[i+1]), so the scan over starts stops at the cap.
  struct Best { int64_t parts; int64_t cost; };
  const Best none{std::numeric_limits<int64_t>::max(), 0};
  std::vector<Best> best(n + 1, none);
  std::vector<int32_t> from(n + 1, -1);
  best[0] = {0, 0};
  for (int32_t j = 1; j <= n; ++j) {
    int64_t tokens = 0, flat_cost = 0;
    for (int32_t i = j - 1; i >= 0; --i) {
      tokens += item.lengths[i] - (model.packing && i + 1 < j ? item.shared_prefix[i + 1] : 0);
      flat_cost += RoundUp(item.lengths[i], model.alignment);
      const int64_t cost = model.packing ? RoundUp(tokens, model.alignment) : flat_cost;
      if (cost > cap) break;
      if (best[i].parts == none.parts) continue;
      const Best cand{best[i].parts + 1, best[i].cost + cost};
      if (cand.parts < best[j].parts || (cand.parts == best[j].parts && cand.cost <= best[j].cost)) {
        best[j] = cand;
        from[j] = i;
      }
    }
  }
  std::vector<ItemPart> parts;
  for (int32_t j = n; j > 0; j = from[j])
    parts.push_back({index, from[j], j, model.Tokens(item, from[j], j), model.Cost(item, from[j], j)});
  std::reverse(parts.begin(), parts.end());
  return parts;
}

}  // namespace tandem::data
