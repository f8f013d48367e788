// The handoff engine's events as JSON, for the daemon's per-group journal
// (docs/handoff.md "In the daemon": the executor journals every event before
// performing its actions, and a restarted daemon replays them through Apply),
// and phase names as users and controllers write them.
//
// Journal form (one object per event; `e` names the event):
//   {"e":"request","phase":"SYNC(3)","at":...}
//   {"e":"hello","role":"rollout","rank":0,"sizes":{"weights":64},"resident":{...},"devices":[{"gpu":0,"used":..,"total":..}],"at":...}
//   {"e":"ack"|"error","role":..,"rank":..,"id":7,"resident":{...},"devices":[...],"message":"..","at":...}
//   {"e":"timeout","role":..,"rank":..,"id":7,"at":...}
//   {"e":"died","role":..,"rank":..,"cause":"..","at":...}
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "orchestrator/handoff/choreography.h"
#include "orchestrator/handoff/types.h"

namespace tandem::handoff {

nlohmann::json EventToJson(const Event& e);
StatusOr<Event> EventFromJson(const nlohmann::json& j);

// PhaseName's inverse: "ROLLOUT", "TRAIN", "TEACHER(1)", "SYNC(3)", "INIT".
StatusOr<Phase> ParsePhaseName(std::string_view name);

// A phase as a controller or the API asks for it: "rollout", "train",
// "sync" (with `version`), "teacher" (the group's first teacher) or
// "teacher:<role name>"; the canonical names above are accepted too.
StatusOr<Phase> ParsePhaseRequest(std::string_view text, int64_t version, const GroupConfig& group);

std::map<Tag, uint64_t> TagBytesFromJson(const nlohmann::json& j);  // {"weights": 64, ...}; unknown tags skipped
nlohmann::json TagBytesToJson(const std::map<Tag, uint64_t>& bytes);

// [{"gpu","used","total","device_wide"}, ...]; malformed entries skipped.
nlohmann::json DevicesToJson(const std::vector<DeviceMemory>& devices);
std::vector<DeviceMemory> DevicesFromJson(const nlohmann::json& j);

}  // namespace tandem::handoff
