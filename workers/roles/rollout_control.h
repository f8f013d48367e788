// The rollout's side of the handoff (issue #14 items 2-4; docs/inference.md
// "Memory and the control protocol"): the control commands of
// docs/control-protocol.md over the engine, the model and the tagged memory
// that holds the model's parameters (`weights`, backed up to host on
// release) and the paged KV pool (`kv_cache`, discarded on release).
//
//   pause{mode}         Generator::Pause (abort | retract | in_place)
//   continue            Generator::Continue (refused while memory is released)
//   release{tags}       Generator::MarkAbsent, then TaggedMemory::Release
//   resume{tags}        TaggedMemory::Resume (same addresses), then MarkPresent
//   load_weights{version, source}
//                       weights::OpenWeightSource(source), written in place
//                       by Generator::LoadWeights; `version` becomes the
//                       weight_version of the requests that start after it
//
// A tag the rollout does not hold is not_found; the engine's refusals
// (release while generating, kv_cache under an in_place pause) are
// failed_precondition. Handlers run on the RoleHost's thread.
#pragma once

#include "workers/inference/generator.h"
#include "workers/model/transformer.h"
#include "workers/runtime/role_host.h"
#include "workers/runtime/tagged_memory.h"

namespace tandem::roles {

struct RolloutParts {
  inference::Generator& engine;
  model::Transformer& model;
  memory::TaggedMemory& memory;
};

void RegisterRolloutControl(control::RoleHost& host, RolloutParts parts);

}  // namespace tandem::roles
