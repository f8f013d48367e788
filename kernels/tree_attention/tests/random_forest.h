// Random packed forests for the tree attention tests: arbitrary preorder
// segment tables (depth, fan-out and segment lengths controlled) and RL-style
// groups (G responses sharing one prompt) built through the forest builder.
#pragma once

#include <algorithm>
#include <random>
#include <vector>

#include "kernels/tree_attention/forest.h"
#include "kernels/tree_attention/forest_builder.h"

namespace tandem::kernels::testing {

struct ForestParams {
  int max_depth = 8;     // segments on one root-to-leaf path
  int max_fanout = 4;    // children per segment
  int max_seg_len = 20;  // tokens per segment (>= 1)
  int roots = 1;
  int max_tokens = 400;
};

// Grows each root depth-first: a segment gets 0..max_fanout children while
// depth and the token budget allow.
inline Forest RandomForest(std::mt19937_64& rng, const ForestParams& p) {
  Forest f;
  std::uniform_int_distribution<int> len(1, p.max_seg_len), fan(0, p.max_fanout);
  struct Item { int parent; int depth; bool first_path; };
  for (int r = 0; r < p.roots && f.num_tokens < p.max_tokens; ++r) {
    std::vector<Item> stack{{-1, 1, true}};
    while (!stack.empty() && f.num_tokens < p.max_tokens) {
      Item it = stack.back();
      stack.pop_back();
      const int l = std::min(len(rng), p.max_tokens - f.num_tokens);
      const int self = static_cast<int>(f.segments.size());
      f.segments.push_back(Segment{f.num_tokens, l, it.parent});
      f.num_tokens += l;
      if (it.depth < p.max_depth) {
        // At least one child on the first path, so the depth is reached; the
        // last pushed child is visited first and continues that path.
        const int n = std::max(fan(rng), it.first_path ? 1 : 0);
        for (int c = 0; c < n; ++c) stack.push_back({self, it.depth + 1, it.first_path && c == n - 1});
      }
    }
  }
  return f;
}

// G sequences: a shared prompt of P tokens, then responses of R tokens each,
// whose first tokens differ (so they fork right after the prompt).
inline std::vector<std::vector<int32_t>> RandomGroup(std::mt19937_64& rng, int P, int R, int G, int vocab = 1000) {
  std::uniform_int_distribution<int32_t> tok(0, vocab - 1);
  std::vector<int32_t> prompt(P);
  for (auto& t : prompt) t = tok(rng);
  std::vector<std::vector<int32_t>> seqs;
  for (int g = 0; g < G; ++g) {
    std::vector<int32_t> s = prompt;
    s.push_back(vocab + g);  // distinct first response token
    for (int i = 1; i < R; ++i) s.push_back(tok(rng));
    seqs.push_back(std::move(s));
  }
  return seqs;
}

}  // namespace tandem::kernels::testing
