// The job manager's pure decisions; see job_decisions.h.
#include "orchestrator/daemon/job_decisions.h"

#include <algorithm>

namespace tandem::daemon {

std::optional<std::vector<int>> ChooseDevices(const std::vector<int>& gpus, const std::set<int>& busy,
                                              const std::vector<int>& logical, bool explicit_ids) {
  std::vector<int> grant;
  if (explicit_ids) {
    for (int l : logical) {
      if (l < 0 || static_cast<size_t>(l) >= gpus.size()) return std::nullopt;  // refused at submit
      const int phys = gpus[static_cast<size_t>(l)];
      if (busy.count(phys)) return std::nullopt;
      grant.push_back(phys);
    }
    return grant;
  }
  for (int g : gpus) {
    if (grant.size() == logical.size()) break;
    if (!busy.count(g)) grant.push_back(g);
  }
  if (grant.size() < logical.size()) return std::nullopt;
  return grant;
}

RestartDecision DecideRestart(const spec::RestartPolicy& policy, int restarts, bool succeeded) {
  const bool wants = policy.kind == spec::RestartPolicy::Kind::kAlways ||
                     (policy.kind == spec::RestartPolicy::Kind::kOnFailure && !succeeded);
  if (!wants || restarts >= policy.max_restarts) return {};
  return {true, std::min(policy.backoff_max_s, policy.backoff_initial_s * (1 << std::min(restarts, 20)))};
}

}  // namespace tandem::daemon
