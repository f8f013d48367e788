// Forest builder: trie insertion, chain cutting, preorder layout
// (forest_builder.h).
#include "kernels/tree_attention/forest_builder.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>

namespace tandem::kernels {

double PackedForest::TokenReduction() const {
  return forest.num_tokens == 0 ? 1.0 : static_cast<double>(flat_tokens) / forest.num_tokens;
}
double PackedForest::PairReduction() const {
  return tree_pairs == 0 ? 1.0 : static_cast<double>(flat_pairs) / static_cast<double>(tree_pairs);
}

namespace {
struct TrieNode {
  int32_t token = 0;
  std::vector<int32_t> children;  // first-seen order
};
}  // namespace

StatusOr<PackedForest> BuildPackedForest(const std::vector<std::vector<int32_t>>& sequences,
                                         bool share_prefixes) {
  // 1. Trie. Node 0 is a virtual super-root whose children are the roots.
  std::vector<TrieNode> nodes(1);
  std::unordered_map<uint64_t, int32_t> child_of;  // (node << 32 | token) -> child
  std::vector<std::vector<int32_t>> paths(sequences.size());  // trie node per token
  PackedForest out;
  for (size_t s = 0; s < sequences.size(); ++s) {
    const std::vector<int32_t>& seq = sequences[s];
    if (seq.empty()) return InvalidArgument("forest builder: sequence " + std::to_string(s) + " is empty");
    int32_t node = 0;
    paths[s].reserve(seq.size());
    for (int32_t tok : seq) {
      if (!share_prefixes && node == 0) {  // a root of its own: nothing below it is shared either
        node = static_cast<int32_t>(nodes.size());
        nodes[0].children.push_back(node);
        nodes.push_back(TrieNode{tok, {}});
        paths[s].push_back(node);
        continue;
      }
      const uint64_t key = (static_cast<uint64_t>(node) << 32) | static_cast<uint32_t>(tok);
      auto [it, inserted] = child_of.try_emplace(key, static_cast<int32_t>(nodes.size()));
      if (inserted) {
        nodes[node].children.push_back(it->second);
        nodes.push_back(TrieNode{tok, {}});
      }
      node = it->second;
      paths[s].push_back(node);
    }
    const int64_t len = static_cast<int64_t>(seq.size());
    out.flat_tokens += len;
    out.flat_pairs += len * (len + 1) / 2;
  }
  if (nodes.size() - 1 > static_cast<size_t>(INT32_MAX)) return InvalidArgument("forest builder: too many tokens");

  // 2. Preorder walk (iterative: chains can be long). A segment starts at a
  //    root or at a child of a node with more than one child.
  std::vector<int32_t> packed_index(nodes.size(), -1);
  struct Item { int32_t node; int32_t parent_segment; };
  std::vector<Item> stack;
  const std::vector<int32_t>& roots = nodes[0].children;
  for (size_t i = roots.size(); i-- > 0;) stack.push_back({roots[i], -1});
  Forest& f = out.forest;
  while (!stack.empty()) {
    Item it = stack.back();
    stack.pop_back();
    int32_t node = it.node;
    const int32_t seg_index = static_cast<int32_t>(f.segments.size());
    f.segments.push_back(Segment{f.num_tokens, 0, it.parent_segment});
    // Follow the chain while it does not branch.
    while (true) {
      packed_index[node] = f.num_tokens++;
      out.tokens.push_back(nodes[node].token);
      ++f.segments[seg_index].length;
      const std::vector<int32_t>& ch = nodes[node].children;
      if (ch.size() == 1) { node = ch[0]; continue; }
      for (size_t i = ch.size(); i-- > 0;) stack.push_back({ch[i], seg_index});
      break;
    }
  }

  out.position_ids = PositionIds(f);
  out.tree_pairs = TreePairs(f);
  out.seq_offsets.assign(sequences.size() + 1, 0);
  out.seq_positions.reserve(out.flat_tokens);
  for (size_t s = 0; s < sequences.size(); ++s) {
    for (int32_t node : paths[s]) out.seq_positions.push_back(packed_index[node]);
    out.seq_offsets[s + 1] = static_cast<int32_t>(out.seq_positions.size());
  }
  TANDEM_RETURN_IF_ERROR(ValidateForest(f), "forest builder (internal)");
  return out;
}

std::vector<std::vector<int32_t>> UnpackSequences(const PackedForest& p) {
  std::vector<std::vector<int32_t>> out(p.seq_offsets.empty() ? 0 : p.seq_offsets.size() - 1);
  for (size_t s = 0; s < out.size(); ++s) {
    for (int32_t i = p.seq_offsets[s]; i < p.seq_offsets[s + 1]; ++i) out[s].push_back(p.tokens[p.seq_positions[i]]);
  }
  return out;
}

void GatherFlatRows(const PackedForest& p, const float* src, int64_t width, float* dst) {
  for (size_t i = 0; i < p.seq_positions.size(); ++i) {
    std::memcpy(dst + static_cast<int64_t>(i) * width, src + static_cast<int64_t>(p.seq_positions[i]) * width,
                sizeof(float) * width);
  }
}

}  // namespace tandem::kernels
