// The varlen plan of a forest (varlen_plan.h).
#include "kernels/tree_attention/varlen_plan.h"

#include <algorithm>
#include <climits>
#include <string>

namespace tandem::kernels {

StatusOr<VarlenTreePlan> BuildVarlenTreePlan(const Forest& forest, int64_t max_chunk_keys) {
  if (max_chunk_keys < 1 || max_chunk_keys > INT32_MAX)
    return InvalidArgument("varlen plan: max_chunk_keys must be in [1, 2^31), got " + std::to_string(max_chunk_keys));
  const int32_t n = static_cast<int32_t>(forest.segments.size());
  // Key path length of every segment: its ancestors' tokens and its own.
  std::vector<int64_t> path(static_cast<size_t>(n));
  for (int32_t s = 0; s < n; ++s) {
    const Segment& seg = forest.segments[static_cast<size_t>(s)];
    path[static_cast<size_t>(s)] = seg.length + (seg.parent < 0 ? 0 : path[static_cast<size_t>(seg.parent)]);
    if (path[static_cast<size_t>(s)] > INT32_MAX)
      return InvalidArgument("varlen plan: segment " + std::to_string(s) + "'s key path exceeds 2^31 keys");
  }
  VarlenTreePlan plan;
  std::vector<int32_t> chain;  // a segment's ancestors, nearest first
  for (int32_t s = 0; s < n;) {
    VarlenChunk c;
    c.first_segment = s;
    c.q_begin = forest.segments[static_cast<size_t>(s)].start;
    c.cu_q.push_back(0);
    c.cu_k.push_back(0);
    int64_t keys = 0;
    // Segments join the chunk while its keys stay within the budget (at least one).
    for (; s < n && (s == c.first_segment || keys + path[static_cast<size_t>(s)] <= max_chunk_keys); ++s) {
      const Segment& seg = forest.segments[static_cast<size_t>(s)];
      chain.clear();
      for (int32_t a = seg.parent; a >= 0; a = forest.segments[static_cast<size_t>(a)].parent) chain.push_back(a);
      for (auto a = chain.rbegin(); a != chain.rend(); ++a) {
        const Segment& anc = forest.segments[static_cast<size_t>(*a)];
        for (int32_t t = 0; t < anc.length; ++t) c.key_rows.push_back(anc.start + t);
      }
      for (int32_t t = 0; t < seg.length; ++t) c.key_rows.push_back(seg.start + t);
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

}  // namespace tandem::kernels
