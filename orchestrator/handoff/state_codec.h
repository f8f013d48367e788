// A colocation group's whole engine state as JSON and back (docs/
// handoff.md), for the snapshot that compacts a group's journal
// (orchestrator/daemon/handoff_group.h): recovery = snapshot + the events
// journaled after it, so a long job's restart replays a bounded journal.
//
// Contract: for every state Apply can produce, StateFromJson(StateToJson(s))
// continues exactly as s does (the same actions and states for any later
// events; state_codec_test drives whole handoffs to check it). The group's
// config is not in the snapshot: it is the job spec's, and StateFromJson takes
// it; a snapshot whose workers are not the config's, or that StateToJson
// cannot have written, is refused with kDataLoss.
#pragma once

#include <memory>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "orchestrator/handoff/transition.h"

namespace tandem::handoff {

nlohmann::json StateToJson(const GroupState& s);
StatusOr<GroupState> StateFromJson(const nlohmann::json& j, std::shared_ptr<const GroupConfig> config);

}  // namespace tandem::handoff
