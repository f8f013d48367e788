// The varlen plan of a forest (varlen_plan.h).
#include "kernels/tree_attention/varlen_plan.h"

#include <algorithm>
#include <climits>
#include <string>

namespace tandem::kernels {

namespace {

Status CheckBudget(int64_t max_chunk_keys) {
  if (max_chunk_keys < 1 || max_chunk_keys > INT32_MAX)
    return InvalidArgument("varlen plan: max_chunk_keys must be in [1, 2^31), got " + std::to_string(max_chunk_keys));
  return Status::Ok();
}

// Key path length of every segment: its ancestors' tokens and its own.
StatusOr<std::vector<int64_t>> PathLengths(const Forest& forest) {
  const size_t n = forest.segments.size();
  std::vector<int64_t> path(n);
  for (size_t s = 0; s < n; ++s) {
    const Segment& seg = forest.segments[s];
    path[s] = seg.length + (seg.parent < 0 ? 0 : path[static_cast<size_t>(seg.parent)]);
    if (path[s] > INT32_MAX)
      return InvalidArgument("varlen plan: segment " + std::to_string(s) + "'s key path exceeds 2^31 keys");
  }
  return path;
}

// Appends the tokens of segment s's key path (root first, s last) to rows.
void AppendPath(const Forest& forest, int32_t s, std::vector<int32_t>& chain, std::vector<int32_t>& rows) {
  chain.clear();
  for (int32_t a = s; a >= 0; a = forest.segments[static_cast<size_t>(a)].parent) chain.push_back(a);
  for (auto a = chain.rbegin(); a != chain.rend(); ++a) {
    const Segment& seg = forest.segments[static_cast<size_t>(*a)];
    for (int32_t t = 0; t < seg.length; ++t) rows.push_back(seg.start + t);
  }
}

}  // namespace

StatusOr<VarlenTreePlan> BuildVarlenTreePlan(const Forest& forest, int64_t max_chunk_keys) {
  TANDEM_RETURN_IF_ERROR(CheckBudget(max_chunk_keys));
  const int32_t n = static_cast<int32_t>(forest.segments.size());
  TANDEM_ASSIGN_OR_RETURN(const std::vector<int64_t> path, PathLengths(forest));
  VarlenTreePlan plan;
  std::vector<int32_t> chain;
  for (int32_t s = 0; s < n;) {
    VarlenChunk c;
    const int32_t first = s;
    c.q_begin = forest.segments[static_cast<size_t>(s)].start;
    c.cu_q.push_back(0);
    c.cu_k.push_back(0);
    int64_t keys = 0;
    // Segments join the chunk while its keys stay within the budget (at least one).
    for (; s < n && (s == first || keys + path[static_cast<size_t>(s)] <= max_chunk_keys); ++s) {
      const Segment& seg = forest.segments[static_cast<size_t>(s)];
      AppendPath(forest, s, chain, c.key_rows);
      keys += path[static_cast<size_t>(s)];
      c.cu_q.push_back(c.cu_q.back() + seg.length);
      c.cu_k.push_back(static_cast<int32_t>(c.key_rows.size()));
      c.max_q = std::max(c.max_q, seg.length);
      c.max_k = std::max(c.max_k, static_cast<int32_t>(path[static_cast<size_t>(s)]));
      const int64_t ancestors = path[static_cast<size_t>(s)] - seg.length;
      plan.pairs += seg.length * ancestors + static_cast<int64_t>(seg.length) * (seg.length + 1) / 2;
    }
    c.q_end = c.q_begin + c.cu_q.back();
    plan.gathered_keys += static_cast<int64_t>(c.key_rows.size());
    plan.chunks.push_back(std::move(c));
  }
  return plan;
}

StatusOr<VarlenSplitPlan> BuildVarlenSplitPlan(const Forest& forest, int64_t max_chunk_keys) {
  TANDEM_RETURN_IF_ERROR(CheckBudget(max_chunk_keys));
  const size_t n = forest.segments.size();
  TANDEM_ASSIGN_OR_RETURN(const std::vector<int64_t> path, PathLengths(forest));
  VarlenSplitPlan plan;
  VarlenChunk& self = plan.self;
  self.q_end = forest.num_tokens;
  self.cu_q.push_back(0);
  for (const Segment& seg : forest.segments) {
    self.cu_q.push_back(seg.start + seg.length);
    self.max_q = std::max(self.max_q, seg.length);
    plan.pairs += static_cast<int64_t>(seg.length) * (seg.length + 1) / 2;
  }
  self.cu_k = self.cu_q;
  self.max_k = self.max_q;
  std::vector<std::vector<int32_t>> children(n);
  for (size_t s = 0; s < n; ++s)
    if (forest.segments[s].parent >= 0) children[static_cast<size_t>(forest.segments[s].parent)].push_back(static_cast<int32_t>(s));
  std::vector<int32_t> chain;
  VarlenChunk c;
  auto close_chunk = [&] {
    if (c.cu_q.size() < 2) return;
    plan.gathered_keys += static_cast<int64_t>(c.key_rows.size());
    plan.gathered_queries += static_cast<int64_t>(c.q_rows.size());
    plan.ancestors.push_back(std::move(c));
    c = VarlenChunk{};
  };
  for (size_t p = 0; p < n; ++p) {
    if (children[p].empty()) continue;
    if (c.cu_q.empty()) {
      c.causal = false;
      c.cu_q.push_back(0);
      c.cu_k.push_back(0);
    } else if (static_cast<int64_t>(c.key_rows.size()) + path[p] > max_chunk_keys) {
      close_chunk();
      c.causal = false;
      c.cu_q.push_back(0);
      c.cu_k.push_back(0);
    }
    int64_t rows = 0;
    for (const int32_t child : children[p]) {
      const Segment& seg = forest.segments[static_cast<size_t>(child)];
      for (int32_t t = 0; t < seg.length; ++t) c.q_rows.push_back(seg.start + t);
      rows += seg.length;
    }
    AppendPath(forest, static_cast<int32_t>(p), chain, c.key_rows);
    c.cu_q.push_back(static_cast<int32_t>(c.q_rows.size()));
    c.cu_k.push_back(static_cast<int32_t>(c.key_rows.size()));
    c.max_q = std::max(c.max_q, static_cast<int32_t>(rows));
    c.max_k = std::max(c.max_k, static_cast<int32_t>(path[p]));
    plan.pairs += rows * path[p];
  }
  close_chunk();
  return plan;
}

}  // namespace tandem::kernels
