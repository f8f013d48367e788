// Packed forest: validation, depths, key visibility and the tile plan
// (forest.h has the model).
#include "kernels/tree_attention/forest.h"

#include <algorithm>
#include <climits>
#include <string>

namespace tandem::kernels {

Status ValidateForest(const Forest& f) {
  if (f.num_tokens < 0) return InvalidArgument("forest: negative num_tokens");
  int64_t next = 0;
  const int32_t n = static_cast<int32_t>(f.segments.size());
  for (int32_t s = 0; s < n; ++s) {
    const Segment& seg = f.segments[s];
    const std::string where = "forest segment " + std::to_string(s);
    if (seg.start != next) {
      return InvalidArgument(where + ": starts at " + std::to_string(seg.start) + ", expected " +
                             std::to_string(next));
    }
    if (seg.length < 1) return InvalidArgument(where + ": length must be >= 1");
    if (seg.parent < -1 || seg.parent >= s) {
      return InvalidArgument(where + ": parent " + std::to_string(seg.parent) +
                             " must be -1 or an earlier segment");
    }
    if (seg.parent >= 0) {
      // Preorder: the parent is an ancestor-or-self of the previous segment.
      int32_t a = s - 1;
      while (a >= 0 && a != seg.parent) a = f.segments[a].parent;
      if (a != seg.parent) {
        return InvalidArgument(where + ": not in depth-first preorder (parent " +
                               std::to_string(seg.parent) + " is not on the previous path)");
      }
    }
    next += seg.length;
  }
  if (next != f.num_tokens) {
    return InvalidArgument("forest: segments cover " + std::to_string(next) + " tokens, num_tokens is " +
                           std::to_string(f.num_tokens));
  }
  return Status::Ok();
}

std::vector<int32_t> TokenSegments(const Forest& f) {
  std::vector<int32_t> out(f.num_tokens);
  for (size_t s = 0; s < f.segments.size(); ++s) {
    const Segment& seg = f.segments[s];
    std::fill(out.begin() + seg.start, out.begin() + seg.start + seg.length, static_cast<int32_t>(s));
  }
  return out;
}

std::vector<int32_t> PositionIds(const Forest& f) {
  std::vector<int32_t> depth0(f.segments.size());
  std::vector<int32_t> out(f.num_tokens);
  for (size_t s = 0; s < f.segments.size(); ++s) {
    const Segment& seg = f.segments[s];
    depth0[s] = seg.parent < 0 ? 0 : depth0[seg.parent] + f.segments[seg.parent].length;
    for (int32_t i = 0; i < seg.length; ++i) out[seg.start + i] = depth0[s] + i;
  }
  return out;
}

namespace {
// Subtree end (exclusive token index) of every segment.
std::vector<int32_t> SubtreeEnds(const Forest& f) {
  std::vector<int32_t> end(f.segments.size());
  for (size_t s = 0; s < f.segments.size(); ++s) end[s] = f.segments[s].start + f.segments[s].length;
  for (size_t s = f.segments.size(); s-- > 0;) {
    const int32_t p = f.segments[s].parent;
    if (p >= 0) end[p] = std::max(end[p], end[s]);
  }
  return end;
}
}  // namespace

std::vector<int32_t> KeyVisibleEnd(const Forest& f) {
  const std::vector<int32_t> end = SubtreeEnds(f);
  std::vector<int32_t> out(f.num_tokens);
  for (size_t s = 0; s < f.segments.size(); ++s) {
    const Segment& seg = f.segments[s];
    std::fill(out.begin() + seg.start, out.begin() + seg.start + seg.length, end[s]);
  }
  return out;
}

int64_t TreePairs(const Forest& f) {
  int64_t pairs = 0;
  for (int32_t d : PositionIds(f)) pairs += d + 1;
  return pairs;
}

namespace {
// Sorts and merges half-open intervals stored flat as (begin, end) pairs.
void MergeIntervals(std::vector<std::pair<int32_t, int32_t>>& iv, std::vector<int32_t>& out) {
  std::sort(iv.begin(), iv.end());
  size_t i = 0;
  while (i < iv.size()) {
    int32_t b = iv[i].first, e = iv[i].second;
    size_t j = i + 1;
    while (j < iv.size() && iv[j].first <= e) e = std::max(e, iv[j++].second);
    out.push_back(b);
    out.push_back(e);
    i = j;
  }
}
}  // namespace

StatusOr<TreeAttentionPlan> BuildTreeAttentionPlan(const Forest& f) {
  TANDEM_RETURN_IF_ERROR(ValidateForest(f), "tree attention plan");
  TreeAttentionPlan plan;
  plan.num_tokens = f.num_tokens;
  plan.num_tiles = (f.num_tokens + kTreeTile - 1) / kTreeTile;
  plan.kend = KeyVisibleEnd(f);
  const std::vector<int32_t> seg_of = TokenSegments(f);
  const int32_t nt = plan.num_tiles;
  plan.tile_kend_min.assign(nt, INT32_MAX);
  for (int32_t k = 0; k < f.num_tokens; ++k) {
    plan.tile_kend_min[k / kTreeTile] = std::min(plan.tile_kend_min[k / kTreeTile], plan.kend[k]);
  }

  plan.q_ptr.assign(nt + 1, 0);
  std::vector<std::pair<int32_t, int32_t>> iv;
  for (int32_t qt = 0; qt < nt; ++qt) {
    const int32_t q0 = qt * kTreeTile, q1 = std::min(q0 + kTreeTile, f.num_tokens);
    iv.clear();
    for (int32_t s = seg_of[q0]; s <= seg_of[q1 - 1]; ++s) {
      const Segment& own = f.segments[s];
      // Own segment, causally: keys up to the last query of the tile in it.
      const int32_t own_end = std::min(own.start + own.length, q1);
      iv.emplace_back(own.start / kTreeTile, (own_end - 1) / kTreeTile + 1);
      for (int32_t a = own.parent; a >= 0; a = f.segments[a].parent) {
        const Segment& seg = f.segments[a];
        iv.emplace_back(seg.start / kTreeTile, (seg.start + seg.length - 1) / kTreeTile + 1);
      }
    }
    MergeIntervals(iv, plan.kv_ranges);
    plan.q_ptr[qt + 1] = static_cast<int32_t>(plan.kv_ranges.size() / 2);
  }

  // Transpose: for each key tile, the query tiles that visit it (ascending).
  std::vector<std::vector<int32_t>> visitors(nt);
  for (int32_t qt = 0; qt < nt; ++qt) {
    for (int32_t j = plan.q_ptr[qt]; j < plan.q_ptr[qt + 1]; ++j) {
      for (int32_t kt = plan.kv_ranges[2 * j]; kt < plan.kv_ranges[2 * j + 1]; ++kt) {
        visitors[kt].push_back(qt);
        ++plan.tile_pairs;
      }
    }
  }
  plan.k_ptr.assign(nt + 1, 0);
  for (int32_t kt = 0; kt < nt; ++kt) {
    const std::vector<int32_t>& v = visitors[kt];
    size_t i = 0;
    while (i < v.size()) {
      size_t j = i + 1;
      while (j < v.size() && v[j] == v[j - 1] + 1) ++j;
      plan.q_ranges.push_back(v[i]);
      plan.q_ranges.push_back(v[j - 1] + 1);
      i = j;
    }
    plan.k_ptr[kt + 1] = static_cast<int32_t>(plan.q_ranges.size() / 2);
  }
  return plan;
}

}  // namespace tandem::kernels
