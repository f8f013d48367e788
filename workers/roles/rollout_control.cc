// The rollout's control commands (rollout_control.h).
#include "workers/roles/rollout_control.h"

#include <string>
#include <vector>

#include "common/log.h"
#include "workers/inference/generation.h"
#include "workers/inference/tagged_model.h"
#include "workers/weights/weight_source.h"

namespace tandem::roles {
namespace {

using nlohmann::json;

StatusOr<inference::MemoryPart> PartOf(const std::string& tag) {
  if (tag == "weights") return inference::MemoryPart::kWeights;
  if (tag == "kv_cache") return inference::MemoryPart::kKvCache;
  return NotFound("tag " + tag + " is not held by this rollout (it holds weights, kv_cache)");
}

// The tags a release/resume names (all when none), each one the rollout holds.
StatusOr<std::vector<std::string>> TagsOf(const control::Command& c, const memory::TaggedMemory& mem) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<std::string> tags, c.Tags());
  if (tags.empty()) return mem.TagNames();
  for (const std::string& t : tags) TANDEM_RETURN_IF_ERROR(PartOf(t).status(), c.type);
  return tags;
}

}  // namespace

void RegisterRolloutControl(control::RoleHost& host, RolloutParts p) {
  host.On("pause", [p](const control::Command& c) -> StatusOr<json> {
    TANDEM_ASSIGN_OR_RETURN(std::string name, c.Mode());
    TANDEM_ASSIGN_OR_RETURN(inference::PauseMode mode, inference::ParsePauseMode(name), "pause");
    TANDEM_RETURN_IF_ERROR(p.engine.Pause(mode));
    return json{{"mode", name}};
  });
  host.On("continue", [p](const control::Command&) -> StatusOr<json> {
    TANDEM_RETURN_IF_ERROR(p.engine.Continue());
    return json::object();
  });
  host.On("release", [p](const control::Command& c) -> StatusOr<json> {
    TANDEM_ASSIGN_OR_RETURN(std::vector<std::string> tags, TagsOf(c, p.memory));
    uint64_t freed = 0, copied = 0;
    for (const std::string& t : tags) {
      TANDEM_ASSIGN_OR_RETURN(inference::MemoryPart part, PartOf(t));
      TANDEM_RETURN_IF_ERROR(p.engine.MarkAbsent(part));
      TANDEM_ASSIGN_OR_RETURN(memory::TaggedMemory::Moved moved, p.memory.Release(t), "release " + t);
      freed += moved.freed_bytes;
      copied += moved.copied_bytes;
    }
    inference::ReturnCachedDeviceMemory();
    log::Info("rollout", "released {} freed_bytes={} copied_bytes={}", json(tags).dump(), freed, copied);
    return json{{"freed_bytes", freed}, {"copied_bytes", copied}};
  });
  host.On("resume", [p](const control::Command& c) -> StatusOr<json> {
    TANDEM_ASSIGN_OR_RETURN(std::vector<std::string> tags, TagsOf(c, p.memory));
    uint64_t mapped = 0, copied = 0;
    for (const std::string& t : tags) {
      TANDEM_ASSIGN_OR_RETURN(inference::MemoryPart part, PartOf(t));
      TANDEM_ASSIGN_OR_RETURN(memory::TaggedMemory::Moved moved, p.memory.Resume(t), "resume " + t);
      p.engine.MarkPresent(part);
      mapped += moved.mapped_bytes;
      copied += moved.copied_bytes;
    }
    log::Info("rollout", "resumed {} mapped_bytes={} copied_bytes={}", json(tags).dump(), mapped, copied);
    return json{{"mapped_bytes", mapped}, {"copied_bytes", copied}};
  });
  host.On("load_weights", [p](const control::Command& c) -> StatusOr<json> {
    TANDEM_ASSIGN_OR_RETURN(int64_t version, c.Version());
    TANDEM_ASSIGN_OR_RETURN(std::string source, c.Source());
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<weights::WeightSource> from, weights::OpenWeightSource(source));
    TANDEM_RETURN_IF_ERROR(p.engine.LoadWeights(version, [&] { return from->LoadInto(p.model); }), "load_weights");
    log::Info("rollout", "loaded weights version {} from {}", version, from->Describe());
    return json{{"version", version}, {"source", from->Describe()}};
  });
}

}  // namespace tandem::roles
