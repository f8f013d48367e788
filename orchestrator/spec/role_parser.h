// Parsing one role of a job spec (schemas/jobspec.schema.json, $defs/role)
// and the backend object ($defs/backend*). Internal to orchestrator/spec/.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "orchestrator/spec/job_spec.h"
#include "orchestrator/spec/spec_reader.h"

namespace tandem::spec::internal {

// Every native worker kind the format knows (schemas/jobspec.schema.json,
// $defs/role.worker), in the schema's order.
inline constexpr std::array<std::string_view, 6> kWorkerKinds = {"actor", "rollout", "teacher", "probe", "sft", "proxy"};

struct ParsedRole {
  RoleSpec role;
  // replicas, gpus_per_replica and colocate_with parsed without error, so the
  // cross-role checks (colocation, device fit) may use them.
  bool shape_ok = true;
};

// Parses roles.<name>; reports violations to `r`, including the per-role
// checks a schema cannot make (replica_env has one entry per replica;
// restart.backoff_max_s >= restart.backoff_s) and that a "worker" is one of
// `workers`, the ones this build has (refused with the list of them).
ParsedRole ParseRole(const Json& v, const std::string& name, const std::string& path,
                     const std::vector<std::string>& workers, Reader& r);

// Parses the backend object: its kind and that kind's options.
BackendSpec ParseBackend(const Json& v, const std::string& path, Reader& r);

}  // namespace tandem::spec::internal
