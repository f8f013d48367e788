// Parsing the job spec's `handoff` section (schemas/jobspec.schema.json,
// $defs/handoff; docs/jobspec.md "handoff") into HandoffSpec, and the checks
// a schema cannot make about it. Internal to orchestrator/spec/.
#pragma once

#include <vector>

#include "orchestrator/spec/colocation.h"
#include "orchestrator/spec/job_spec.h"
#include "orchestrator/spec/spec_reader.h"

namespace tandem::spec::internal {

// Parses the `handoff` object at `path`; reports every schema violation to
// `r`, and one check within the section: a phase may not resume, for a kind,
// a tag that it also releases for that kind (except teachers in the teacher
// phase, where `release` applies to the other teachers and `resume` to the
// teacher whose turn it is). Invalid entries are left out of the result.
struct ParsedHandoff {
  HandoffSpec handoff;
  // handoff.roles was read without error, so KindOf is what the user meant
  // and the checks against the roles may use it.
  bool roles_ok = true;
};
ParsedHandoff ParseHandoff(const Json& v, const std::string& path, Reader& r);

// The checks against the job's roles, reported at handoff.roles.<name>,
// handoff.controller or roles.<name>.worker (none when !h.roles_ok: they
// would only repeat an error already reported):
//   - handoff.roles keys and controller name roles of the job;
//   - a role with worker actor/rollout/teacher is not given another kind;
//   - the controller takes part in the handoff (KindOf is not "").
// With `col` (the resolved colocation groups; nullptr when they are not
// resolved, so nothing is said about groups), once the checks above passed:
//   - every role that takes part has GPUs in its colocation group;
//   - a colocation group has at most one actor-kind role.
void CheckHandoffRoles(const ParsedHandoff& parsed, const std::vector<RoleSpec>& roles,
                       const Colocation* col, Reader& r);

}  // namespace tandem::spec::internal
