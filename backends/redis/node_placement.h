// Placement of tasks onto redis nodes and their GPUs (docs/redis.md
// "Placement"; docs/jobspec.md "Colocation and placement").
//
// A job's devices are named in its logical namespace (TANDEM_DEVICES). Each
// node advertises its own GPUs at registration (the agent's --gpus); the
// daemon binds every logical device of a job to one node and one of that
// node's GPU *slots* (an index into the node's --gpus list), and the agent
// maps slots onto its physical ids (CUDA_VISIBLE_DEVICES). Rules:
//   - all devices of one task are on one node;
//   - a logical device already bound (held by a running launch of the job)
//     keeps its node and slot, so colocated roles — identical or
//     overlapping device sets — share a node and see identical physical ids;
//   - different logical devices never share a slot while both are held, so
//     replicas get disjoint GPUs;
//   - a node is chosen only if it has enough free slots: a node with fewer
//     GPUs than a task asks for gets nothing placed. Among those that fit,
//     the one with the fewest tasks wins (then the name).
// A task without devices goes to the live node with the fewest tasks.
// A binding lives while a launch holds it (Hold/Release), so a restarted
// task whose colocated partner still runs goes back to the partner's node.
//
// Pure bookkeeping, no I/O; used on the daemon's io thread.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace tandem::backends::redis {

struct NodeCapacity {
  std::string name;
  int gpus = 0;   // GPUs the node advertised
  int tasks = 0;  // tasks this daemon runs there
};

struct NodeChoice {
  std::string node;
  std::vector<int> slots;  // node-local GPU index per logical device, in order
};

class NodePlacer {
 public:
  // Where a task of `job` using `logical` devices goes among `live` nodes;
  // ResourceExhausted (saying what each node has free) when none fits,
  // Unavailable when there is no live node.
  StatusOr<NodeChoice> Place(const std::string& job, const std::vector<int>& logical,
                             const std::vector<NodeCapacity>& live) const;
  // A launch now uses `choice` for `logical` (after Place, or on reattach).
  void Hold(const std::string& job, const std::vector<int>& logical, const NodeChoice& choice);
  // That launch ended.
  void Release(const std::string& job, const std::vector<int>& logical, const std::string& node);

  // Slots of `node` held now (for tests and logs).
  std::vector<int> UsedSlots(const std::string& node) const;

 private:
  struct Binding {
    std::string node;
    int slot = 0;
    int holders = 0;
  };
  std::map<std::pair<std::string, int>, Binding> bindings_;  // (job, logical id) -> binding
};

// "1,3" -> {1, 3}; InvalidArgument on anything else ("" -> {}).
StatusOr<std::vector<int>> ParseDeviceList(const std::string& text);

}  // namespace tandem::backends::redis
