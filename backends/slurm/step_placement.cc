// Tasks onto the nodes of a multi-node allocation: see step_placement.h.
#include "backends/slurm/step_placement.h"

namespace tandem::backends::slurm {

StatusOr<StepPlacement> PlaceStep(const Allocation& alloc, const std::vector<int>& logical) {
  StepPlacement p;
  if (alloc.nodes.empty()) {
    for (int l : logical) {
      if (l < 0 || static_cast<size_t>(l) >= alloc.gpus.size())
        return InvalidArgument("logical device " + std::to_string(l) + " outside the allocation's " +
                               std::to_string(alloc.gpus.size()) + " GPUs");
      p.gpus.push_back(alloc.gpus[static_cast<size_t>(l)]);
    }
    return p;
  }
  auto gpus_of = [&](const std::string& node) -> const std::vector<int>& {
    auto it = alloc.node_gpus.find(node);
    return it == alloc.node_gpus.end() ? alloc.gpus : it->second;
  };
  if (logical.empty()) {
    p.node = alloc.nodes.front();
    return p;
  }
  // Logical device d is on the node whose [start, start + its GPUs) holds d.
  size_t node = 0;
  auto locate = [&](int d) -> StatusOr<std::pair<size_t, int>> {
    size_t k = 0;
    int s = 0;
    for (; k < alloc.nodes.size(); ++k) {
      const int g = static_cast<int>(gpus_of(alloc.nodes[k]).size());
      if (d >= s && d < s + g) return std::make_pair(k, d - s);
      s += g;
    }
    return InvalidArgument("logical device " + std::to_string(d) + " outside the allocation's " +
                           std::to_string(s) + " GPUs on " + std::to_string(alloc.nodes.size()) + " nodes");
  };
  for (size_t i = 0; i < logical.size(); ++i) {
    if (logical[i] < 0) return InvalidArgument("negative logical device");
    TANDEM_ASSIGN_OR_RETURN(auto at, locate(logical[i]));
    if (i == 0) node = at.first;
    else if (at.first != node)
      return InvalidArgument("devices span nodes " + alloc.nodes[node] + " and " + alloc.nodes[at.first] +
                             ": a replica is never split across nodes");
    p.gpus.push_back(gpus_of(alloc.nodes[node])[static_cast<size_t>(at.second)]);
  }
  p.node = alloc.nodes[node];
  return p;
}

}  // namespace tandem::backends::slurm
