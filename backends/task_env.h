// The environment of a task (docs/jobspec.md "Environment"
// and "Colocation and placement"): one function, applied by every backend path (local, Slurm
// step, Redis node agent, forked colocated roles), so a task sees the same
// environment wherever it runs.
//
// Order, later layers overriding earlier ones:
//   1. a clean base: only the allow-listed variables (BaseEnvironmentAllowList)
//      copied from the launching process's own environment; PATH defaults to
//      /usr/local/bin:/usr/bin:/bin when unset;
//   2. the job's `env`;
//   3. the role's `env`;
//   4. `replica_env[i]` of the task's replica, then per-task overrides;
//   5. tandem's own variables: TANDEM_JOB_ID, TANDEM_TASK_ID, TANDEM_ROLE,
//      TANDEM_RANK, TANDEM_WORLD_SIZE, TANDEM_PORTS (comma-separated),
//      TANDEM_RUN_DIR, TANDEM_DEVICES (logical ids, comma-separated),
//      CUDA_VISIBLE_DEVICES (physical ids; the empty string for a task without
//      devices, so a CPU-only task never sees a GPU), and TANDEM_CONTROL when
//      given.
// The input is plain maps so a node agent can use this without the job spec.
// Executors may add one more variable of their own (the local backend adds
// TANDEM_TASK_MARK, see backends/local/local_executor.h).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::backends {

using EnvMap = std::map<std::string, std::string>;

struct TaskEnvInput {
  EnvMap job_env;         // layer 2
  EnvMap role_env;        // layer 3
  EnvMap replica_env;     // layer 4a: replica_env[rank] of the role
  EnvMap task_overrides;  // layer 4b: anything else set for this one task

  std::string job_id;
  std::string task_id;
  std::string role;
  int rank = 0;
  int world_size = 1;
  std::vector<int> ports;             // leased ports (port_lease.h)
  std::string run_dir;
  std::vector<int> logical_devices;   // the job's namespace
  std::vector<int> physical_devices;  // the node's ids
  std::string control;                // TANDEM_CONTROL; omitted when empty

  // The environment the clean base is copied from. Unset: the launching
  // process's own environment (environ). Tests set it.
  std::optional<EnvMap> base_source;
};

// The variables copied from the launcher's environment into the clean base.
const std::vector<std::string_view>& BaseEnvironmentAllowList();

// PATH used when the launcher has none.
inline constexpr std::string_view kDefaultPath = "/usr/local/bin:/usr/bin:/bin";

// The task's complete environment as "KEY=VALUE" strings, sorted by key, one
// entry per key.
std::vector<std::string> BuildTaskEnvironment(const TaskEnvInput& in);

// The current process's environment as a map (first entry wins on duplicates).
EnvMap ProcessEnvironment();

// The value of `key` in a "KEY=VALUE" list such as LaunchRequest::env ("" when absent).
std::string EnvValue(const std::vector<std::string>& env, std::string_view key);

}  // namespace tandem::backends
