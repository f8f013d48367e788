// Groups of samples (groups.h).
#include "workers/rl/groups.h"

#include <string>
#include <unordered_map>
#include <vector>

#include "workers/rl/tensor_args.h"

namespace tandem::rl {

StatusOr<Groups> Groups::FromRuns(const std::vector<int64_t>& run_sizes, int64_t num_samples) {
  Groups g;
  int64_t total = 0;
  for (size_t i = 0; i < run_sizes.size(); ++i) {
    if (run_sizes[i] < 0)
      return InvalidArgument("group runs: run " + std::to_string(i) + " has negative size " +
                             std::to_string(run_sizes[i]));
    total += run_sizes[i];
  }
  if (total != num_samples)
    return InvalidArgument("group runs: sizes sum to " + std::to_string(total) + ", the batch has " +
                           std::to_string(num_samples) + " samples");
  g.group_of_sample.reserve(static_cast<size_t>(num_samples));
  for (size_t i = 0; i < run_sizes.size(); ++i) {
    g.sizes.push_back(run_sizes[i]);
    g.names.push_back(static_cast<int64_t>(i));
    g.group_of_sample.insert(g.group_of_sample.end(), static_cast<size_t>(run_sizes[i]), static_cast<int64_t>(i));
  }
  return g;
}

StatusOr<Groups> Groups::FromIds(const at::Tensor& ids) {
  if (!ids.defined()) return InvalidArgument("group ids: missing (an undefined tensor)");
  if (ids.dim() != 1) return InvalidArgument("group ids: expected a 1-D tensor, got shape " + ShapeString(ids.sizes()));
  TANDEM_RETURN_IF_ERROR(CheckIndex("group ids", ids, ids.size(0)));
  return GuardTorch("group ids", [&]() -> StatusOr<Groups> {
    const at::Tensor host = ids.to(at::kCPU, at::kLong).contiguous();
    const int64_t* p = host.data_ptr<int64_t>();
    Groups g;
    std::unordered_map<int64_t, int64_t> index;
    g.group_of_sample.reserve(static_cast<size_t>(host.numel()));
    for (int64_t i = 0; i < host.numel(); ++i) {
      const auto [it, fresh] = index.emplace(p[i], g.num_groups());
      if (fresh) {
        g.sizes.push_back(0);
        g.names.push_back(p[i]);
      }
      ++g.sizes[static_cast<size_t>(it->second)];
      g.group_of_sample.push_back(it->second);
    }
    return g;
  });
}

Status Validate(const Groups& g) {
  if (g.names.size() != g.sizes.size())
    return InvalidArgument("groups: " + std::to_string(g.sizes.size()) + " sizes but " +
                           std::to_string(g.names.size()) + " names");
  std::vector<int64_t> counted(g.sizes.size(), 0);
  for (size_t i = 0; i < g.group_of_sample.size(); ++i) {
    const int64_t k = g.group_of_sample[i];
    if (k < 0 || k >= g.num_groups())
      return InvalidArgument("groups: sample " + std::to_string(i) + " is in group " + std::to_string(k) +
                             ", there are " + std::to_string(g.num_groups()));
    ++counted[static_cast<size_t>(k)];
  }
  for (size_t k = 0; k < counted.size(); ++k)
    if (counted[k] != g.sizes[k])
      return InvalidArgument("groups: group " + std::to_string(k) + " has size " + std::to_string(g.sizes[k]) +
                             " but " + std::to_string(counted[k]) + " samples");
  return Status::Ok();
}

}  // namespace tandem::rl
