// Implements node_placement.h.
#include "backends/redis/node_placement.h"

#include <algorithm>
#include <set>

namespace tandem::backends::redis {

std::vector<int> NodePlacer::UsedSlots(const std::string& node) const {
  std::set<int> used;
  for (const auto& [k, b] : bindings_)
    if (b.node == node && b.holders > 0) used.insert(b.slot);
  return {used.begin(), used.end()};
}

StatusOr<NodeChoice> NodePlacer::Place(const std::string& job, const std::vector<int>& logical,
                                       const std::vector<NodeCapacity>& live) const {
  if (live.empty()) return Unavailable("redis: no node holds a live lease (is a tandem-agent running?)");
  auto fewest = [](const NodeCapacity* a, const NodeCapacity* b) {
    return a->tasks != b->tasks ? a->tasks < b->tasks : a->name < b->name;
  };
  if (logical.empty()) {
    const NodeCapacity* best = nullptr;
    for (const auto& n : live)
      if (!best || fewest(&n, best)) best = &n;
    return NodeChoice{best->name, {}};
  }
  // Slots for `logical` on `node`, or an empty vector when they do not fit.
  auto slots_on = [&](const NodeCapacity& node) {
    std::vector<int> used = UsedSlots(node.name);
    std::set<int> taken(used.begin(), used.end());
    std::vector<int> out(logical.size(), -1);
    for (size_t i = 0; i < logical.size(); ++i) {  // devices already bound here keep their slot
      auto it = bindings_.find({job, logical[i]});
      if (it != bindings_.end() && it->second.node == node.name && it->second.holders > 0) out[i] = it->second.slot;
    }
    for (size_t i = 0; i < logical.size(); ++i) {
      if (out[i] >= 0) continue;
      int s = 0;
      while (taken.count(s)) ++s;
      if (s >= node.gpus) return std::vector<int>();
      taken.insert(s);
      out[i] = s;
    }
    return out;
  };
  // A device already held pins the node.
  for (int l : logical) {
    auto it = bindings_.find({job, l});
    if (it == bindings_.end() || it->second.holders <= 0) continue;
    auto node = std::find_if(live.begin(), live.end(), [&](const NodeCapacity& n) { return n.name == it->second.node; });
    if (node == live.end()) continue;  // its node is gone: the partners are lost too
    std::vector<int> slots = slots_on(*node);
    if (slots.empty())
      return ResourceExhausted("redis: node " + node->name + " holds logical device " + std::to_string(l) +
                               " of job " + job + " but has no free GPU for the task's other devices");
    return NodeChoice{node->name, slots};
  }
  const NodeCapacity* best = nullptr;
  std::vector<int> best_slots;
  std::string free_desc;
  for (const auto& n : live) {
    std::vector<int> slots = slots_on(n);
    free_desc += (free_desc.empty() ? "" : ", ") + n.name + " " +
                 std::to_string(n.gpus - static_cast<int>(UsedSlots(n.name).size())) + "/" + std::to_string(n.gpus);
    if (slots.empty()) continue;
    if (!best || fewest(&n, best)) {
      best = &n;
      best_slots = slots;
    }
  }
  if (!best)
    return ResourceExhausted("redis: no live node has " + std::to_string(logical.size()) + " free GPU" +
                             (logical.size() == 1 ? "" : "s") + " for job " + job + " (free/advertised: " +
                             free_desc + ")");
  return NodeChoice{best->name, best_slots};
}

void NodePlacer::Hold(const std::string& job, const std::vector<int>& logical, const NodeChoice& choice) {
  for (size_t i = 0; i < logical.size() && i < choice.slots.size(); ++i) {
    Binding& b = bindings_[{job, logical[i]}];
    if (b.holders > 0 && (b.node != choice.node || b.slot != choice.slots[i])) b.holders = 0;
    b.node = choice.node;
    b.slot = choice.slots[i];
    ++b.holders;
  }
}

void NodePlacer::Release(const std::string& job, const std::vector<int>& logical, const std::string& node) {
  for (int l : logical) {
    auto it = bindings_.find({job, l});
    if (it == bindings_.end() || it->second.node != node) continue;
    if (--it->second.holders <= 0) bindings_.erase(it);
  }
}

StatusOr<std::vector<int>> ParseDeviceList(const std::string& text) {
  std::vector<int> out;
  if (text.empty()) return out;
  size_t pos = 0;
  while (true) {
    size_t comma = text.find(',', pos);
    std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos || item.size() > 6)
      return InvalidArgument("device list '" + text + "': bad id '" + item + "'");
    out.push_back(std::stoi(item));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

}  // namespace tandem::backends::redis
