// The job manager's pure decisions, kept apart from the code that acts on
// them so that they are tested as tables (tests/daemon/job_decisions_test.cc):
// which physical GPUs a job is granted, and whether (and when) a task that
// exited is restarted (job_manager.h, "Lifecycle of a job"; docs/jobspec.md
// "restart").
#pragma once

#include <optional>
#include <set>
#include <vector>

#include "orchestrator/spec/job_spec.h"

namespace tandem::daemon {

// The physical GPUs a job gets now, or nullopt while not enough are free.
// `gpus` is the daemon's inventory in order, `busy` what other jobs hold,
// `logical` the job's logical devices. With `explicit_ids` (the spec listed
// device ids) a logical id names a position in `gpus`, and exactly those
// must be free; otherwise the first free GPUs in inventory order are taken.
std::optional<std::vector<int>> ChooseDevices(const std::vector<int>& gpus, const std::set<int>& busy,
                                              const std::vector<int>& logical, bool explicit_ids);

// Whether a task that exited (`succeeded` or not) after `restarts` restarts
// is restarted under its role's policy, and after how long: the backoff
// starts at backoff_initial_s and doubles per restart, up to backoff_max_s.
struct RestartDecision {
  bool restart = false;
  double delay_s = 0;
};
RestartDecision DecideRestart(const spec::RestartPolicy& policy, int restarts, bool succeeded);

}  // namespace tandem::daemon
