// The rollout's and the teacher's side of the handoff (issue #14 items 2-4,
// 6; docs/inference.md "Memory and the control protocol"): the control
// commands of docs/control-protocol.md over an engine (the Generator or the
// Scorer, through inference::HandoffEngine), the model and the tagged memory
// that holds its parameters (`weights`, backed up to host on release) and,
// for the rollout, the paged KV pool (`kv_cache`, discarded on release).
//
//   pause{mode}         HandoffEngine::Pause (abort | retract | in_place)
//   continue            HandoffEngine::Continue (refused while memory is released)
//   release{tags}       MarkAbsent, then TaggedMemory::Release
//   resume{tags}        TaggedMemory::Resume (same addresses), then MarkPresent
//   load_weights{version, source}
//                       weights::OpenWeightSource(source), written in place
//                       by HandoffEngine::LoadWeights; `version` becomes the
//                       weight_version of the work that starts after it (a
//                       source that names another version is refused); then
//                       WeightSource::Acknowledge (the publisher may free it);
//                       with frozen_weights, answered {version, frozen: true}
//                       without opening the source (its readers are others)
//
// A tag the engine does not hold is not_found; the engine's refusals
// (release while working, kv_cache under an in_place pause) are
// failed_precondition. Handlers run on the RoleHost's thread; log lines
// carry `component` ("rollout", "teacher").
#pragma once

#include <string>

#include "workers/inference/handoff_engine.h"
#include "workers/model/transformer.h"
#include "workers/runtime/role_host.h"
#include "workers/runtime/tagged_memory.h"

namespace tandem::roles {

struct EngineParts {
  inference::HandoffEngine& engine;
  model::Transformer& model;
  memory::TaggedMemory& memory;
  std::string component;
  bool frozen_weights = false;  // load_weights answered without loading (ServeOptions::frozen_weights)
};

void RegisterEngineControl(control::RoleHost& host, EngineParts parts);

}  // namespace tandem::roles
